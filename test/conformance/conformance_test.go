// Package conformance builds upstream's Kubernetes e2e suite (the
// framework and the sig-api-machinery specs of k8s.io/kubernetes, at the
// release that matches the k8s.io modules of Outpost's go.mod) into one
// test binary, to run against `outpost up`. It is a module of its own so
// that the main module's `go test ./...` neither builds nor runs it;
// run.sh builds and runs it (`make conformance`).
package conformance

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	conformancetestdata "k8s.io/kubernetes/test/conformance/testdata"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// Ensure that logging flags are part of the command line, as
	// upstream's e2e.go does.
	_ "k8s.io/component-base/logs/testinit"

	// The feature and label constants the specs use, defined and frozen.
	_ "k8s.io/kubernetes/test/e2e/feature"

	// The specs: sig-api-machinery alone.
	_ "k8s.io/kubernetes/test/e2e/apimachinery"

	// On a failure, dump the namespace's events and pods into the spec's
	// output (the summary reads image pull failures from it).
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

// TestMain registers and parses the framework's flags and completes its
// TestContext, as upstream's test/e2e/e2e_test.go does.
func TestMain(m *testing.M) {
	showVersion := flag.CommandLine.Bool("version", false, "print the version of the e2e suite and exit")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s\n", flag.CommandLine.Args())
		os.Exit(2)
	}
	// The manifests and fixtures some specs read, from the files
	// embedded in the upstream packages.
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	testfiles.AddFileSource(conformancetestdata.GetConformanceTestdataFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// TestConformance runs the focused specs through Ginkgo, as upstream's
// RunE2ETests does, with its JUnit and JSON reports where --report-dir
// and --ginkgo.json-report say.
func TestConformance(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Outpost conformance (sig-api-machinery)", suiteConfig, reporterConfig)
}
