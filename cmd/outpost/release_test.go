package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestReleaseCreate: keygen writes a key pair; create signs a release of
// a Go binary (its platform read from it) and a device file for any
// platform, which a node trusting the key verifies; two keys sign for a
// threshold of two.
func TestReleaseCreate(t *testing.T) {
	dir := t.TempDir()
	ops, second := filepath.Join(dir, "ops"), filepath.Join(dir, "security")
	for _, k := range []string{ops, second} {
		out, err := runOutpost(t, "release", "keygen", "--out", k)
		if err != nil || !strings.Contains(out, "key id") {
			t.Fatalf("keygen: %q, %v", out, err)
		}
	}
	if fi, err := os.Stat(ops + ".key"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the private key: %v, %v; want mode 0600", fi, err)
	}
	if _, err := runOutpost(t, "release", "keygen", "--out", ops); err == nil {
		t.Error("keygen over an existing key succeeded, want it refused")
	}

	agent, err := os.Executable() // a Go binary of this platform
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "config.tar")
	if err := os.WriteFile(bundle, []byte(strings.Repeat("config ", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	signed := filepath.Join(dir, "r.json")
	out, err := runOutpost(t, "release", "create", "gateway", "--version", "1.4.0",
		"--component", "agent="+agent, "--component", "config@any="+bundle,
		"--key", ops+".key", "--key", second+".key", "--expires", "24h", "-o", signed, "--no-upload")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	if !strings.Contains(out, "agent") || !strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) || !strings.Contains(out, "config") {
		t.Errorf("create printed %q, want both components with the agent's platform", out)
	}
	envelope, err := os.ReadFile(signed)
	if err != nil {
		t.Fatal(err)
	}
	var keys []ed25519.PublicKey
	for _, k := range []string{ops, second} {
		pub, err := readPublicKey(k + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, pub)
	}
	m, err := manifest.Verify(envelope, manifest.Trust{Keys: keys, Threshold: 2},
		manifest.VerifyOptions{Now: time.Now(), OS: runtime.GOOS, Arch: runtime.GOARCH})
	if err != nil {
		t.Fatalf("a node trusting both keys: %v", err)
	}
	if m.Name != "gateway" || m.Version != "1.4.0" || len(m.Components) != 2 || m.Expires.Sub(m.Created) != 24*time.Hour {
		t.Errorf("manifest %+v", m)
	}
	if err := m.Components[0].VerifyFile(agent); err != nil {
		t.Errorf("the agent's digests: %v", err)
	}
	if _, err := manifest.Verify(envelope, manifest.Trust{Keys: keys[:1]},
		manifest.VerifyOptions{Now: time.Now().Add(25 * time.Hour), OS: runtime.GOOS, Arch: runtime.GOARCH}); manifest.ReasonOf(err) != manifest.Expired {
		t.Errorf("after --expires: %v, want Expired", err)
	}
}

// TestReleaseCreateRefusals: what create cannot sign is refused with
// what to do, and nothing is written.
func TestReleaseCreateRefusals(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k")
	if _, err := runOutpost(t, "release", "keygen", "--out", key); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not a binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.json")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no version", []string{"--component", "notes@any=" + text, "--key", key + ".key"}, "--version is required"},
		{"no key", []string{"--version", "1.0.0", "--component", "notes@any=" + text}, "--key is required"},
		{"no component", []string{"--version", "1.0.0", "--key", key + ".key"}, "--component"},
		{"bad component", []string{"--version", "1.0.0", "--key", key + ".key", "--component", "notes"}, "want NAME=FILE"},
		{"agent not a binary", []string{"--version", "1.0.0", "--key", key + ".key", "--component", "agent=" + text}, "neither a Go binary nor an ELF file"},
		{"agent for any", []string{"--version", "1.0.0", "--key", key + ".key", "--component", "agent@any=" + text}, "one platform"},
		{"bad version", []string{"--version", "v1", "--key", key + ".key", "--component", "notes@any=" + text}, "version"},
		{"public key", []string{"--version", "1.0.0", "--key", key + ".pub", "--component", "notes@any=" + text}, "signing key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runOutpost(t, append([]string{"release", "create", "r", "-o", out, "--no-upload"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create = %v, want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a refused create wrote %s", out)
			}
		})
	}
}

// TestReleaseUploadAndTrust, against a real hub: trust add/list/remove
// edit the trust ConfigMap within the threshold's rules; create uploads
// the artifacts and makes the Release, which the hub marks Verified and
// ArtifactsStored; the same release again changes nothing, another
// envelope under the name is refused.
func TestReleaseUploadAndTrust(t *testing.T) {
	kubeconfig := startTestHub(t)
	dir := t.TempDir()
	ops, sec := filepath.Join(dir, "ops"), filepath.Join(dir, "sec")
	for _, k := range []string{ops, sec} {
		if _, err := runOutpost(t, "release", "keygen", "--out", k); err != nil {
			t.Fatal(err)
		}
	}
	opsPub, err := readPublicKey(ops + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	secPub, err := readPublicKey(sec + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	opsID, secID := manifest.KeyID(opsPub), manifest.KeyID(secPub)
	kc := []string{"--kubeconfig", kubeconfig}
	trustCmd := func(args ...string) (string, error) {
		return runOutpost(t, append(append([]string{"release", "trust"}, args...), kc...)...)
	}

	if out, err := trustCmd("list"); err != nil || !strings.Contains(out, "trusts no release key") {
		t.Fatalf("list of an empty trust set: %q, %v", out, err)
	}
	if _, err := trustCmd("add", ops+".pub", "--threshold", "2"); err == nil || !strings.Contains(err.Error(), "threshold 2 with 1") {
		t.Fatalf("add with a threshold over the keys: %v", err)
	}
	if out, err := trustCmd("add", ops+".pub"); err != nil || !strings.Contains(out, opsID) || !strings.Contains(out, "threshold: 1 of 1") {
		t.Fatalf("add: %q, %v", out, err)
	}
	if out, err := trustCmd("add", sec+".pub", "--threshold", "2"); err != nil || !strings.Contains(out, "threshold: 2 of 2") {
		t.Fatalf("add a second key: %q, %v", out, err)
	}
	if _, err := trustCmd("remove", secID); err == nil || !strings.Contains(err.Error(), "threshold 2 with 1") {
		t.Fatalf("remove below the threshold: %v", err)
	}
	if _, err := trustCmd("remove", "0123456789abcdef"); err == nil || !strings.Contains(err.Error(), "does not trust") {
		t.Fatalf("remove of an unknown key: %v", err)
	}
	if out, err := trustCmd("remove", secID, "--threshold", "1"); err != nil || strings.Contains(out, secID) || !strings.Contains(out, "threshold: 1 of 1") {
		t.Fatalf("remove: %q, %v", out, err)
	}
	if out, err := trustCmd("list"); err != nil || !strings.Contains(out, opsID) || strings.Contains(out, secID) {
		t.Fatalf("list: %q, %v", out, err)
	}

	bundle := filepath.Join(dir, "config.tar")
	if err := os.WriteFile(bundle, []byte(strings.Repeat("config ", 100000)), 0o644); err != nil {
		t.Fatal(err)
	}
	create := func(version string) (string, error) {
		return runOutpost(t, append([]string{"release", "create", "gateway", "--version", version,
			"--component", "config@any=" + bundle, "--key", ops + ".key", "-o", filepath.Join(dir, "r-"+version+".json")}, kc...)...)
	}
	out, err := create("1.4.0")
	if err != nil || !strings.Contains(out, "700000 bytes uploaded") || !strings.Contains(out, "release gateway 1.4.0 created") {
		t.Fatalf("create: %q, %v", out, err)
	}

	up, err := newUploader(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wait.For(t, 60*time.Second, "the release to be verified and stored", func() (bool, string) {
		rel, err := up.release(ctx, "gateway")
		if err != nil || rel == nil {
			return false, fmt.Sprint(err)
		}
		ok := 0
		for _, c := range rel.Status.Conditions {
			if c.Status == metav1.ConditionTrue {
				ok++
			}
		}
		return ok == 2 && slices.Equal(rel.Status.KeyIDs, []string{opsID}), fmt.Sprintf("%+v", rel.Status)
	})

	// The same release again: nothing sent, nothing changed. The same
	// name with another envelope (re-signed, a new version): refused.
	envelope, err := os.ReadFile(filepath.Join(dir, "r-1.4.0.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Verify(envelope, manifest.Trust{Keys: []ed25519.PublicKey{opsPub}}, manifest.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := up.upload(ctx, &buf, m, envelope, map[string]string{"config": bundle}); err != nil || !strings.Contains(buf.String(), "0 bytes uploaded") || !strings.Contains(buf.String(), "unchanged") {
		t.Fatalf("upload of the same release: %q, %v", buf.String(), err)
	}
	if _, err := create("1.5.0"); err == nil || !strings.Contains(err.Error(), "pick a new name") {
		t.Fatalf("create over an existing release: %v", err)
	}
}
