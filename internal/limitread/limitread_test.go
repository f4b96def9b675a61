package limitread

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAll(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int64
		ok    bool
	}{{"", 0, true}, {"abc", 3, true}, {"abcd", 3, false}, {"a", 0, false}} {
		b, err := All(strings.NewReader(tc.in), tc.limit)
		switch {
		case tc.ok && (err != nil || string(b) != tc.in):
			t.Errorf("All(%q, %d) = %q, %v; want it whole", tc.in, tc.limit, b, err)
		case !tc.ok && (!errors.Is(err, ErrTooLarge) || b != nil):
			t.Errorf("All(%q, %d) = %q, %v; want ErrTooLarge", tc.in, tc.limit, b, err)
		}
	}
}

func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := File(p, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("File(10) = %q, %v", b, err)
	}
	if _, err := File(p, 9); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), p) {
		t.Errorf("File(9) = %v, want ErrTooLarge naming the file", err)
	}
	if _, err := File(p+"-none", 9); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("File(missing) = %v, want ErrNotExist", err)
	}
}
