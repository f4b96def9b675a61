package updater

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// OpenArtifact finds the agent committed and on trial, and a file
// component's artifact, by sha256; not the previous slot, nor what the
// updater never kept.
func TestOpenArtifact(t *testing.T) {
	f := newFixture(t)
	u := f.updater()
	read := func(sha string) ([]byte, error) {
		t.Helper()
		file, err := u.OpenArtifact(sha)
		if err != nil {
			return nil, err
		}
		defer file.Close()
		return io.ReadAll(file)
	}
	_, c1 := artifact(t, f.tmp, "agent", manifest.KindAgent, agentBytes("1.0.0"))
	if _, err := read(c1.SHA256); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenArtifact before any install = %v, want fs.ErrNotExist", err)
	}
	if err := f.install(u, "1.0.0", false); err != nil {
		t.Fatal(err)
	}
	if got, err := read(c1.SHA256); err != nil || !bytes.Equal(got, agentBytes("1.0.0")) {
		t.Fatalf("OpenArtifact of the agent on trial: %v, %d bytes", err, len(got))
	}
	f.boot()
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := f.install(u, "2.0.0", false); err != nil {
		t.Fatal(err)
	}
	_, c2 := artifact(t, f.tmp, "agent", manifest.KindAgent, agentBytes("2.0.0"))
	for _, c := range []manifest.Component{c1, c2} {
		if _, err := read(c.SHA256); err != nil {
			t.Errorf("OpenArtifact(%s): %v; want the committed and trial agents", c.SHA256, err)
		}
	}
	f.boot()
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := read(c1.SHA256); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenArtifact of the previous slot = %v, want fs.ErrNotExist", err)
	}
	for _, bad := range []string{"", "../state.json", c2.SHA256[:63] + "G", fmt.Sprintf("%064d", 0)} {
		if _, err := read(bad); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("OpenArtifact(%q) = %v, want fs.ErrNotExist", bad, err)
		}
	}

	// A file component, on trial.
	hook, _ := writeHook(t, "#!/bin/sh\nexit 0\n")
	cfg := DefaultConfig(f.dir)
	cfg.Hook = hook
	uf, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("modem firmware\n"), 500)
	path, c := artifact(t, f.tmp, "modem", manifest.KindFile, content)
	if err := uf.InstallFile(context.Background(), "rel", "1.0.0", path, c, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	file, err := uf.OpenArtifact(c.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(file)
	file.Close()
	if !bytes.Equal(got, content) {
		t.Errorf("OpenArtifact of the file component: %d bytes, not its artifact", len(got))
	}
	// A stored artifact cut short is not offered.
	stored := uf.filePath("modem", c.SHA256)
	if err := os.Truncate(stored, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := uf.OpenArtifact(c.SHA256); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenArtifact of a truncated %s = %v, want fs.ErrNotExist", filepath.Base(stored), err)
	}
}
