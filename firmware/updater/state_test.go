package updater

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func sampleState() *State {
	s := trialState(1, t0)
	s.Previous = &Slot{Slot: SlotInstalled}
	s.Failed = []Failure{{Version: "0.9.0", Release: "r0", Component: "agent", Reason: CrashedInTrial, Message: "died", At: t0}}
	s.Files = []*FileRecord{{Name: "modem; rm -rf /", Committed: &FileState{Release: "r1", Version: "1.0.0", Size: 3, SHA256: strings.Repeat("a", 64)},
		Trial: &FileTrial{FileState: FileState{Release: "r2", Version: "1.1.0", Size: 4, SHA256: strings.Repeat("b", 64)}, Phase: PhaseInstalled, Installed: t0, Window: time.Minute}}}
	s.LastOutcome = outcome("agent", "r2", "1.1.0", "Trial", "", "installed", t0)
	return s
}

func TestStateRoundTrip(t *testing.T) {
	s := sampleState()
	b, err := encodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decodeState(encodeState(s)) = %v", err)
	}
	b2, _ := encodeState(got)
	if !bytes.Equal(b, b2) {
		t.Errorf("round trip changed the state:\n%s\n%s", b, b2)
	}
}

func TestDecodeStateRejects(t *testing.T) {
	good, _ := encodeState(sampleState())
	for name, in := range map[string]string{
		"empty":          "",
		"not json":       "{",
		"trailing":       string(good) + "{}",
		"unknown field":  `{"format":1,"bogus":1}`,
		"format":         `{"format":2}`,
		"slot":           `{"format":1,"committed":{"slot":"../c"}}`,
		"committed none": `{"format":1,"committed":{"slot":""}}`,
		"version":        `{"format":1,"highest":"v1"}`,
		"same slot":      `{"format":1,"committed":{"slot":"a"},"trial":{"slot":"a","release":"r","version":"1.0.0","size":1,"sha256":"","installed":"2026-01-01T00:00:00Z","window":1000,"boots":0,"maxBoots":1}}`,
		"boots":          `{"format":1,"trial":{"slot":"b","release":"r","version":"1.0.0","size":1,"sha256":"","installed":"2026-01-01T00:00:00Z","window":1000,"boots":5,"maxBoots":1}}`,
		"control char":   `{"format":1,"failed":[{"version":"1.0.0","reason":"x","message":"a\u0001b","at":"2026-01-01T00:00:00Z"}]}`,
		"too large":      `{"format":1,"agentComponent":"` + strings.Repeat("x", MaxStateBytes) + `"}`,
		"file twice":     `{"format":1,"files":[{"name":"x"},{"name":"x"}]}`,
		"null file":      `{"format":1,"files":[null]}`,
	} {
		if _, err := decodeState(strings.NewReader(in)); err == nil {
			t.Errorf("decodeState(%s) = nil error, want a refusal", name)
		}
	}
}

// FuzzDecodeState checks that no state file panics the decoder and that what
// it accepts re-encodes to something it accepts again.
func FuzzDecodeState(f *testing.F) {
	good, _ := encodeState(sampleState())
	f.Add(good)
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":1,"committed":{"slot":"a","version":"1.0.0"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeState(bytes.NewReader(data))
		if err != nil {
			return
		}
		b, err := encodeState(s)
		if err != nil {
			t.Fatalf("encode an accepted state: %v", err)
		}
		if _, err := decodeState(bytes.NewReader(b)); err != nil {
			t.Fatalf("re-decode an accepted state: %v\n%s", err, b)
		}
		// Every decision on an accepted state yields a valid state.
		n, _, _ := decideBoot(s, bootEvent{now: t0, present: both, grace: time.Minute})
		if err := n.validate(); err != nil {
			t.Fatalf("boot on an accepted state gives an invalid one: %v", err)
		}
	})
}

func TestCorruptStateErrorIs(t *testing.T) {
	var err error = &CorruptStateError{Path: "p", Err: errors.New("bad")}
	if !errors.Is(err, ErrCorruptState) {
		t.Errorf("errors.Is(%v, ErrCorruptState) = false", err)
	}
}
