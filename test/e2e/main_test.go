package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// buildTimeout bounds `go build` of the outpost binary; a cold race build
// on a busy two-core machine takes a few minutes.
const buildTimeout = 5 * time.Minute

// binDir holds the binaries built for this run of the package; TestMain
// creates and removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outpost-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: create binary directory:", err)
		os.Exit(1)
	}
	binDir = dir
	// VerifyTestMain runs the tests, then fails the run if a goroutine is
	// left behind, such as one copying the output of a process nobody
	// waited for; it exits without returning.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// binaryEnv names the built binary in the environment of the tests'
// children.
const binaryEnv = "OUTPOST_E2E_BINARY"

var (
	buildOnce sync.Once
	outpost   string // path of the built binary
	buildErr  error
)

// outpostBinary builds cmd/outpost once per run of the package and returns
// its path. Under -race the binary is built with -race too, so that a data
// race in the hub fails the test that drove it there.
func outpostBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		// A test run again in a network namespace of its own
		// (netnstest) uses the binary its parent built.
		if bin := os.Getenv(binaryEnv); bin != "" {
			outpost = bin
			return
		}
		bin := filepath.Join(binDir, "outpost")
		// The Makefile's GOTAGS, as `make build` builds it.
		args := []string{"build", "-tags=grpcnotrace", "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/outpost-mesh/outpost/cmd/outpost")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		outpost = bin
		buildErr = os.Setenv(binaryEnv, bin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return outpost
}
