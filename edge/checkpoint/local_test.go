package checkpoint

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestLocalRecords(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, DefaultConfig())
	for k, v := range map[string]string{
		"restarts/ns/a": "1",
		"restarts/ns/b": "7",
		"mirror/ns/c":   "{}",
		"node/id":       "",
	} {
		if err := s.PutLocal(k, []byte(v)); err != nil {
			t.Fatalf("PutLocal(%q) = %v", k, err)
		}
	}
	if err := s.PutLocal("restarts/ns/a", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLocal("mirror/ns/c"); err != nil {
		t.Fatalf("DeleteLocal() = %v", err)
	}
	if err := s.DeleteLocal("never"); err != nil {
		t.Errorf("DeleteLocal(absent) = %v, want nil", err)
	}
	for _, tc := range []struct {
		key  string
		want []byte
		ok   bool
	}{
		{"restarts/ns/a", []byte("2"), true},
		{"node/id", nil, true},
		{"mirror/ns/c", nil, false},
		{"restarts", nil, false},
	} {
		if got, ok, err := s.GetLocal(tc.key); err != nil || ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("GetLocal(%q) = %q, %v, %v, want %q, %v", tc.key, got, ok, err, tc.want, tc.ok)
		}
	}
	s.Close()
	s = openT(t, dir, DefaultConfig())
	for _, tc := range []struct {
		prefix string
		want   map[string][]byte
	}{
		{"restarts/", map[string][]byte{"restarts/ns/a": []byte("2"), "restarts/ns/b": []byte("7")}},
		{"", map[string][]byte{"restarts/ns/a": []byte("2"), "restarts/ns/b": []byte("7"), "node/id": nil}},
		{"mirror/", map[string][]byte{}},
	} {
		if got, err := s.ListLocal(tc.prefix); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ListLocal(%q) = %q, %v, want %q", tc.prefix, got, err, tc.want)
		}
	}
}

func TestLocalKeyLimits(t *testing.T) {
	s := memT(t)
	long := strings.Repeat("k", MaxLocalKeySize)
	if err := s.PutLocal(long, []byte("v")); err != nil {
		t.Errorf("PutLocal(%d-byte key) = %v", len(long), err)
	}
	if err := s.PutLocal(long+"k", nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("PutLocal(%d-byte key) = %v, want ErrTooLarge", len(long)+1, err)
	}
	if err := s.PutLocal("", nil); err == nil {
		t.Error(`PutLocal("") = nil, want an error`)
	}
	if _, err := s.ListLocal(long + "k"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ListLocal(%d-byte prefix) = %v, want ErrTooLarge", len(long)+1, err)
	}
}
