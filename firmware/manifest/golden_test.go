package manifest

import (
	"bytes"
	"crypto/ed25519"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// update rewrites the golden envelope: go test ./firmware/manifest -run Golden -update.
var update = flag.Bool("update", false, "rewrite testdata/envelope-v1.json")

// goldenPath is a version 1 envelope as Sign writes it. Nodes in the field
// must keep accepting it: a change of the format or of what is signed fails
// this test rather than a fleet.
var goldenPath = filepath.Join("testdata", "envelope-v1.json")

// goldenManifest is the manifest in the golden envelope.
func goldenManifest(t *testing.T) *Manifest {
	return &Manifest{
		Name:               "edge-agent",
		Version:            "1.4.0-rc.1",
		Created:            time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		Expires:            time.Date(2027, 12, 1, 0, 0, 0, 0, time.UTC),
		AllowDowngradeFrom: "1.5.0",
		Components: []Component{
			component(t, "agent", KindAgent, "linux", "arm", "7", []byte("agent binary\n")),
			component(t, "config", KindFile, "", "", "", []byte(strings.Repeat("c", MinChunkSize+1))),
		},
	}
}

// TestGoldenEnvelope checks that Sign writes the committed envelope byte
// for byte (ed25519 signatures are deterministic) and that Verify accepts
// it.
func TestGoldenEnvelope(t *testing.T) {
	pubA, privA := testKey(1)
	pubB, privB := testKey(2)
	got := sign(t, goldenManifest(t), privA, privB)
	if *update {
		if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Sign() =\n%s\nwant (%s)\n%s", got, goldenPath, want)
	}
	trust := Trust{Keys: []ed25519.PublicKey{pubA, pubB}, Threshold: 2}
	m, err := Verify(want, trust, VerifyOptions{Now: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), OS: "linux", Arch: "arm", Variant: "7", HighestCommitted: "1.5.0"})
	if err != nil {
		t.Fatalf("Verify(golden) = %v", err)
	}
	if m.Version != "1.4.0-rc.1" || m.Components[1].Chunks[1] != goldenManifest(t).Components[1].Chunks[1] {
		t.Errorf("Verify(golden) = %+v", m)
	}
}

// TestReadEnvelope checks the size-limited reader.
func TestReadEnvelope(t *testing.T) {
	small := []byte(`{"x":1}`)
	if got, err := ReadEnvelope(bytes.NewReader(small)); err != nil || !bytes.Equal(got, small) {
		t.Errorf("ReadEnvelope(small) = %q, %v", got, err)
	}
	exact := bytes.Repeat([]byte(" "), MaxEnvelopeBytes)
	if got, err := ReadEnvelope(bytes.NewReader(exact)); err != nil || len(got) != MaxEnvelopeBytes {
		t.Errorf("ReadEnvelope(limit) = %d bytes, %v", len(got), err)
	}
	if _, err := ReadEnvelope(zeros{}); ReasonOf(err) != TooLarge {
		t.Errorf("ReadEnvelope(endless) = %v, want TooLarge", err)
	}
}
