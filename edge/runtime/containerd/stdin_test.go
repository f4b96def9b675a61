package containerd

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestStdinFeed: what attachers send is read in order; a closed feed
// hands out the piece in hand, then EOF, and refuses sends.
func TestStdinFeed(t *testing.T) {
	f := newStdinFeed()
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	if err := f.copyFrom(bg, strings.NewReader("one ")); err != nil {
		t.Fatalf("copyFrom = %v", err)
	}
	if err := f.copyFrom(bg, strings.NewReader("two")); err != nil {
		t.Fatalf("copyFrom = %v", err)
	}
	f.close()
	f.close()
	select {
	case s := <-got:
		if s != "one two" {
			t.Errorf("read %q, want %q", s, "one two")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the feed did not end after close")
	}
	if err := f.copyFrom(bg, strings.NewReader("three")); !errors.Is(err, errStdinClosed) {
		t.Errorf("copyFrom after close = %v, want errStdinClosed", err)
	}

	// A send nobody takes ends with its context.
	f = newStdinFeed()
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- f.copyFrom(ctx, strings.NewReader("stuck")) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("copyFrom at its context's end = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("copyFrom did not return at its context's end")
	}
}
