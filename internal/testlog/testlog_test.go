package testlog

import (
	"errors"
	"log/slog"
	"testing"
)

func TestRecorder(t *testing.T) {
	r := NewRecorder(t, slog.LevelInfo)
	log := slog.New(r).With("side", "hub")
	log.Info("joined", "node", "a")
	log.Warn("joined", "err", errors.New("disk full"))
	log.Debug("below the level")
	if got := r.Count("joined"); got != 2 {
		t.Errorf(`Count("joined") = %d, want 2`, got)
	}
	if !r.Has("joined: disk full") || r.Has("below the level") {
		t.Errorf(`Has: "joined: disk full" %v, "below the level" %v; want true, false`, r.Has("joined: disk full"), r.Has("below the level"))
	}
	for _, c := range []struct {
		msg   string
		attrs []string
		want  bool
	}{
		{"joined", nil, true},
		{"joined", []string{"node=a"}, true},
		{"joined", []string{"node=a", "err=disk full"}, false}, // not of one record
		{"joined", []string{"side=hub"}, false},                // With's, not the record's
		{"joined: disk full", nil, false},
		{"below the level", nil, false},
	} {
		if got := r.HasRecord(c.msg, c.attrs...); got != c.want {
			t.Errorf("HasRecord(%q, %q) = %v, want %v", c.msg, c.attrs, got, c.want)
		}
	}
}
