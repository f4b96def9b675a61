package images

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEndpoint(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadEndpoint(dir)
	if !errors.Is(err, ErrNoEndpoint) || !strings.Contains(err.Error(), "outpost edge --data-dir "+dir) {
		t.Errorf("ReadEndpoint of a fresh directory: %v, want ErrNoEndpoint saying what to do", err)
	}
	want := Endpoint{Address: "/run/outpost/containerd.sock", Namespace: "outpost", Snapshotter: "native"}
	if err := WriteEndpoint(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadEndpoint(dir); err != nil || got != want {
		t.Errorf("ReadEndpoint = %+v, %v; want %+v", got, err, want)
	}
	fi, err := os.Stat(EndpointPath(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("endpoint file: %v, mode %v", err, fi.Mode())
	}
	want.Address = "/other.sock"
	if err := WriteEndpoint(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadEndpoint(dir); got != want {
		t.Errorf("ReadEndpoint after a rewrite = %+v, want %+v", got, want)
	}
	if err := WriteEndpoint(dir, Endpoint{Namespace: "x"}); err == nil {
		t.Error("WriteEndpoint without an address succeeded")
	}
	for _, bad := range []string{"", "{", `{"address": "/s"}`, `{"namespace": "n"}`, `{"address": "/s", "namespace": "n"` + strings.Repeat(" ", maxEndpointSize) + `}`} {
		if err := os.WriteFile(EndpointPath(dir), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadEndpoint(dir); err == nil || errors.Is(err, ErrNoEndpoint) {
			t.Errorf("ReadEndpoint of %.40q: %v, want an error", bad, err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(EndpointPath(dir))); len(entries) != 1 {
		t.Errorf("runtime directory holds %d files, want only the endpoint", len(entries))
	}
}

func FuzzDecodeEndpoint(f *testing.F) {
	f.Add([]byte(`{"address": "/run/c.sock", "namespace": "outpost"}`))
	f.Add([]byte(`{"address": "/run/c.sock", "namespace": "outpost", "snapshotter": "native"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEndpoint(b)
		if err == nil && (e.Address == "" || e.Namespace == "") {
			t.Fatalf("decodeEndpoint(%q) = %+v without error", b, e)
		}
	})
}
