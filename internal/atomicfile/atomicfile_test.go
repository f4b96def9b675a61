package atomicfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	for _, tc := range []struct {
		data []byte
		perm os.FileMode
	}{
		{[]byte("first"), 0o600},
		{[]byte("second, longer than the first"), 0o644},
		{nil, 0o600},
	} {
		if err := WriteFile(path, tc.data, tc.perm); err != nil {
			t.Fatalf("WriteFile(%q) = %v", tc.data, err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, tc.data) {
			t.Errorf("content = %q, want %q", got, tc.data)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tc.perm {
			t.Errorf("mode = %v, want %v", fi.Mode().Perm(), tc.perm)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file: %v", len(entries), entries)
	}
}

func TestWriteFileMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "file")
	if err := WriteFile(path, []byte("x"), 0o600); err == nil {
		t.Fatalf("WriteFile into a missing directory = nil, want an error")
	}
}

func TestWriteFileKeepsOldOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "file")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory at the target makes the rename fail after the temporary
	// file was written.
	target := filepath.Join(dir, "dir")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "child"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, []byte("new"), 0o600); err == nil {
		t.Fatalf("WriteFile over a non-empty directory = nil, want an error")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("directory holds %v, want only file and dir (no temporary left)", entries)
	}
}
