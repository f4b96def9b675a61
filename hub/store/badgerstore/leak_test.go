package badgerstore

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

// TestCloseLeavesNoGoroutines: Close stops the committer, watchers still
// being served (one reading, one not) and badger itself.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Open(testConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := s.Create(ctx, "/a/b", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	reading, err := s.Watch(ctx, "/a/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch(ctx, "/a/", kv.ModRevision-1); err != nil { // never read
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "/a/b", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	<-reading
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range reading { // closed by Close
	}
}
