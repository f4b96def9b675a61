package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/hub/pki"
)

// runOutpost runs the outpost command with args and returns its stdout.
func runOutpost(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append([]string{"--log-level", "error"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// startTestHub runs a hub until the test ends and returns its admin
// kubeconfig's path.
func startTestHub(t *testing.T) string {
	t.Helper()
	// klog's logger is global and read unlocked by the hub's clients:
	// set it once before they start, not in the first command the test
	// runs while they run (the root command sets it once per process).
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(slog.DiscardHandler)) })
	cfg := hubd.DefaultConfig(t.TempDir())
	cfg.APIAddr = "127.0.0.1:0"
	h, err := hubd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("hub: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("hub did not stop within 30s")
		}
	})
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatalf("hub stopped before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("hub not ready within 60s")
	}
	return h.KubeconfigPath()
}

var tokenLine = regexp.MustCompile(`(?m)^token: ([a-z0-9]{6})\.([a-z0-9]{16})$`)

func TestTokenCommands(t *testing.T) {
	kubeconfig := startTestHub(t)
	t.Setenv("KUBECONFIG", "")
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(rc)
	k, err := pki.ReadKubeconfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509FromPEM(k.Clusters[0].Cluster.CertificateAuthorityData)
	if err != nil {
		t.Fatal(err)
	}
	hash := pki.CAHash(ca)

	start := time.Now()
	out, err := runOutpost(t, "token", "create", "--kubeconfig", kubeconfig, "--site", "berlin-3", "--ttl", "2h", "--description", "line 3")
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	m := tokenLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("token create printed no token:\n%s", out)
	}
	id, token := m[1], m[1]+"."+m[2]
	for _, want := range []string{
		"ca-cert-hash: " + hash + "\n",
		"site: berlin-3\n",
		"outpost edge --hub 127.0.0.1:7443 --token " + token + " --ca-cert-hash " + hash + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("token create printed\n%s\nwant a line %q", out, want)
		}
	}

	// The Secret is a bootstrap token for the site, expiring in 2h.
	s, err := admin.CoreV1().Secrets("kube-system").Get(context.Background(), "bootstrap-token-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeBootstrapToken || string(s.Data["description"]) != "line 3" {
		t.Errorf("secret type %q description %q", s.Type, s.Data["description"])
	}
	if site, err := auth.ValidateBootstrapToken(s, token, time.Now()); err != nil || site != "berlin-3" {
		t.Errorf("ValidateBootstrapToken(created secret) = %q, %v; want berlin-3", site, err)
	}
	exp, ok := auth.BootstrapTokenExpiration(s)
	if !ok || exp.Before(start.Add(2*time.Hour).Truncate(time.Second)) || exp.After(time.Now().Add(2*time.Hour)) {
		t.Errorf("expiration %v, %v; want 2h from now", exp, ok)
	}
	if !strings.Contains(out, "expires: "+exp.UTC().Format(time.RFC3339)) {
		t.Errorf("token create printed\n%s\nwant the expiration %s", out, exp.UTC().Format(time.RFC3339))
	}

	// Another, never expiring, with the sync address given, and the
	// kubeconfig from $KUBECONFIG.
	t.Setenv("KUBECONFIG", kubeconfig)
	out, err = runOutpost(t, "token", "create", "--ttl", "0", "--sync-addr", "hub.example.com:17443")
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	m2 := tokenLine.FindStringSubmatch(out)
	if m2 == nil || !strings.Contains(out, "expires: never\n") || strings.Contains(out, "site:") ||
		!strings.Contains(out, "outpost edge --hub hub.example.com:17443 --token "+m2[1]+"."+m2[2]) {
		t.Errorf("token create --ttl 0 --sync-addr printed\n%s", out)
	}

	// list shows both, without their secrets.
	out, err = runOutpost(t, "token", "list")
	if err != nil {
		t.Fatalf("token list: %v", err)
	}
	if !regexp.MustCompile(`(?m)^`+id+` +\S+ +berlin-3 +line 3$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^`+m2[1]+` +never +<none> *$`).MatchString(out) ||
		strings.Contains(out, m[2]) || strings.Contains(out, m2[2]) {
		t.Errorf("token list printed\n%s", out)
	}

	// delete takes an id or a whole token.
	if out, err := runOutpost(t, "token", "delete", token); err != nil || out != "bootstrap token "+id+" deleted\n" {
		t.Errorf("token delete %s = %q, %v", token, out, err)
	}
	if _, err := runOutpost(t, "token", "delete", id); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("token delete of a deleted token: %v, want not found", err)
	}
	if _, err := runOutpost(t, "token", "delete", m2[1]); err != nil {
		t.Errorf("token delete %s: %v", m2[1], err)
	}
	if out, err := runOutpost(t, "token", "list"); err != nil || strings.Contains(out, id) || strings.Contains(out, m2[1]) {
		t.Errorf("token list after delete = %q, %v", out, err)
	}

	// Without flag or $KUBECONFIG: ./.outpost/hub/admin.kubeconfig.
	t.Setenv("KUBECONFIG", "")
	wd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(wd, ".outpost", "hub"), 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, ".outpost", "hub", "admin.kubeconfig"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	if _, err := runOutpost(t, "token", "list"); err != nil {
		t.Errorf("token list with the default kubeconfig: %v", err)
	}
}

func TestTokenBadInput(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Chdir(t.TempDir()) // no ./.outpost here
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "create", "--ttl", "-1h"}, "invalid --ttl"},
		{[]string{"token", "create", "--site", "Berlin 3!"}, "invalid --site"},
		{[]string{"token", "create"}, "load kubeconfig"},
		{[]string{"token", "delete", "ABCDEF"}, "not a token id"},
		{[]string{"token", "delete"}, "requires at least 1 arg"},
		{[]string{"token", "list", "--kubeconfig", "/nonexistent/kubeconfig"}, "load kubeconfig"},
	} {
		_, err := runOutpost(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("outpost %s: %v, want an error with %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestDefaultSyncAddr(t *testing.T) {
	for server, want := range map[string]string{
		"https://127.0.0.1:6443":  "127.0.0.1:7443",
		"https://hub.example.com": "hub.example.com:7443",
		"https://[fd00::1]:6443":  "[fd00::1]:7443",
		"hub.example.com:6443":    "hub.example.com:7443",
		"https://:6443":           "",
		"":                        "",
	} {
		got, err := defaultSyncAddr(server)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("defaultSyncAddr(%q) = %q, %v; want %q", server, got, err, want)
		}
	}
}

func x509FromPEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}
