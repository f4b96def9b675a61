package main

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// TestHealthCheckArg checks the --health-check syntax, good and bad.
func TestHealthCheckArg(t *testing.T) {
	tests := []struct {
		arg  string
		want manifest.HealthCheck
		err  string // a substring of the error; "" for none
	}{
		{arg: "app:default/gateway-app:http=8080/healthz",
			want: manifest.HealthCheck{Name: "app", Namespace: "default", Pod: "gateway-app", HTTP: &manifest.HTTPCheck{Port: 8080, Path: "/healthz"}}},
		{arg: "app:default/gateway-app:http=8080",
			want: manifest.HealthCheck{Name: "app", Namespace: "default", Pod: "gateway-app", HTTP: &manifest.HTTPCheck{Port: 8080, Path: "/"}}},
		{arg: "app:default/gateway-app:http=80/ready?full=1&x=a:b",
			want: manifest.HealthCheck{Name: "app", Namespace: "default", Pod: "gateway-app", HTTP: &manifest.HTTPCheck{Port: 80, Path: "/ready?full=1&x=a:b"}}},
		{arg: "db:default/db:exec=pg_isready -q",
			want: manifest.HealthCheck{Name: "db", Namespace: "default", Pod: "db", Exec: []string{"pg_isready", "-q"}}},
		{arg: "db:default/db/postgres:timeout=10s:exec=pg_isready  -h 127.0.0.1:5432",
			want: manifest.HealthCheck{Name: "db", Namespace: "default", Pod: "db", Container: "postgres", TimeoutSeconds: 10, Exec: []string{"pg_isready", "-h", "127.0.0.1:5432"}}},
		{arg: `db:default/db:timeout=1m:exec=["sh","-c","test -f /ready"]`,
			want: manifest.HealthCheck{Name: "db", Namespace: "default", Pod: "db", TimeoutSeconds: 60, Exec: []string{"sh", "-c", "test -f /ready"}}},
		{arg: "", err: "no NAME"},
		{arg: "app", err: "no NAME"},
		{arg: ":default/app:http=80", err: "no NAME"},
		{arg: "app:default/app", err: "no action"},
		{arg: "app:app:http=80", err: "not NAMESPACE/POD"},
		{arg: "app:a/b/c/d:http=80", err: "not NAMESPACE/POD"},
		{arg: "app:default/app/c:http=80", err: "names no container"},
		{arg: "app:default/app:http=x/healthz", err: "not a number"},
		{arg: "app:default/app:http=/healthz", err: "not a number"},
		{arg: "app:default/app:http=70000/", err: "port 70000"},
		{arg: "app:default/app:http=80/a b", err: "printable ASCII"},
		{arg: "app:default/app:get=80", err: "neither exec= nor http="},
		{arg: "app:default/app:exec=", err: "no command"},
		{arg: "app:default/app:exec=   ", err: "no command"},
		{arg: "app:default/app:exec=[]", err: "no command"},
		{arg: `app:default/app:exec=["a",1]`, err: "JSON list of strings"},
		{arg: "app:default/app:timeout=5:exec=true", err: "whole number of seconds"},
		{arg: "app:default/app:timeout=1.5s:exec=true", err: "whole number of seconds"},
		{arg: "app:default/app:timeout=-1s:exec=true", err: "whole number of seconds"},
		{arg: "app:default/app:timeout=2m:exec=true", err: "timeoutSeconds"},
		{arg: "App:default/app:exec=true", err: "DNS label"},
		{arg: "app:Default/app:exec=true", err: "namespace"},
		{arg: "app:default/:exec=true", err: "pod"},
		{arg: "app:default/app:exec=" + strings.Repeat("a ", manifest.MaxExecArgs+1), err: "arguments"},
	}
	for _, tt := range tests {
		got, err := healthCheckArg(tt.arg)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "--health-check") {
				t.Errorf("healthCheckArg(%q) = %+v, %v, want an error with %q", tt.arg, got, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("healthCheckArg(%q) = %+v, %v, want %+v", tt.arg, got, err, tt.want)
		}
	}
}

// TestReleaseCreateHealthChecks: create signs the release's health
// checks, which a node verifying it reads back; a bad or duplicate check
// is refused and nothing is written.
func TestReleaseCreateHealthChecks(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k")
	if _, err := runOutpost(t, "release", "keygen", "--out", key); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "config.tar")
	if err := os.WriteFile(file, []byte("config"), 0o644); err != nil {
		t.Fatal(err)
	}
	signed := filepath.Join(dir, "r.json")
	base := []string{"release", "create", "r", "--version", "1.0.0", "--component", "config@any=" + file, "--key", key + ".key", "-o", signed, "--no-upload"}
	out, err := runOutpost(t, append(base, "--health-check", "app:default/gateway-app:http=8080/healthz",
		"--health-check", "db:default/db/postgres:timeout=10s:exec=pg_isready -q")...)
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	if !strings.Contains(out, "GET :8080/healthz") || !strings.Contains(out, `exec ["pg_isready","-q"]`) {
		t.Errorf("create printed %q, want both health checks", out)
	}
	envelope, err := os.ReadFile(signed)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := readPublicKey(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Verify(envelope, manifest.Trust{Keys: []ed25519.PublicKey{pub}}, manifest.VerifyOptions{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	want := []manifest.HealthCheck{
		{Name: "app", Namespace: "default", Pod: "gateway-app", HTTP: &manifest.HTTPCheck{Port: 8080, Path: "/healthz"}},
		{Name: "db", Namespace: "default", Pod: "db", Container: "postgres", Exec: []string{"pg_isready", "-q"}, TimeoutSeconds: 10},
	}
	if !reflect.DeepEqual(m.HealthChecks, want) {
		t.Errorf("signed health checks %+v, want %+v", m.HealthChecks, want)
	}
	if err := os.Remove(signed); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad check", []string{"--health-check", "app:default/app:http=80/a b"}, "printable ASCII"},
		{"duplicate", []string{"--health-check", "app:default/a:exec=true", "--health-check", "app:default/b:exec=true"}, "used twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runOutpost(t, append(base, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create = %v, want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(signed); !os.IsNotExist(err) {
				t.Errorf("a refused create wrote %s", signed)
			}
		})
	}
}
