package manifest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"
)

// testNow is the node's clock in tests; manifests run from a day before to
// a month after.
var testNow = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// testKey returns a deterministic key pair numbered n.
func testKey(n byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	seed := sha256.Sum256([]byte{'k', n})
	priv := ed25519.NewKeyFromSeed(seed[:])
	return priv.Public().(ed25519.PublicKey), priv
}

// artifact returns n deterministic pseudo-random bytes seeded by s.
func artifact(s string, n int) []byte {
	out := make([]byte, 0, n+sha256.Size)
	block := sha256.Sum256([]byte(s))
	for len(out) < n {
		out = append(out, block[:]...)
		block = sha256.Sum256(block[:])
	}
	return out[:n]
}

// component builds a component of data for a test, failing it on error.
func component(t testing.TB, name, kind, goos, arch, variant string, data []byte) Component {
	t.Helper()
	c, err := BuildComponent(name, kind, goos, arch, variant, bytes.NewReader(data), MinChunkSize)
	if err != nil {
		t.Fatalf("BuildComponent(%s): %v", name, err)
	}
	return c
}

// testManifest returns a valid manifest of version 1.4.0 with an arm64
// agent, an armv7 agent and an arm64 file.
func testManifest(t testing.TB) *Manifest {
	t.Helper()
	return &Manifest{
		Name:    "edge-agent",
		Version: "1.4.0",
		Created: testNow.Add(-24 * time.Hour),
		Expires: testNow.Add(30 * 24 * time.Hour),
		Components: []Component{
			component(t, "agent-arm64", KindAgent, "linux", "arm64", "", artifact("arm64", 3*MinChunkSize+100)),
			component(t, "agent-armv7", KindAgent, "linux", "arm", "7", artifact("armv7", 2*MinChunkSize)),
			component(t, "modem", KindFile, "linux", "arm64", "", artifact("modem", 10)),
		},
	}
}

// sign signs m with keys, failing the test on error.
func sign(t testing.TB, m *Manifest, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	env, err := Sign(m, keys...)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return env
}

// signRaw returns an envelope of payload signed by keys without checking
// the payload, to test what a node does with content a careless signer let
// through.
func signRaw(t testing.TB, payload []byte, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	env := &Envelope{PayloadType: PayloadType, Payload: payload}
	for _, k := range keys {
		env.Signatures = append(env.Signatures, Signature{
			KeyID: KeyID(k.Public().(ed25519.PublicKey)),
			Sig:   ed25519.Sign(k, signedMessage(payload)),
		})
	}
	return encodeEnvelope(t, env)
}

// encodeEnvelope returns env's JSON without any check.
func encodeEnvelope(t testing.TB, env *Envelope) []byte {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeEnvelope decodes an envelope this test made.
func decodeEnvelope(t testing.TB, data []byte) *Envelope {
	t.Helper()
	env, err := DecodeEnvelope(data)
	if err != nil {
		t.Fatalf("DecodeEnvelope: %v", err)
	}
	return env
}

// payloadOf returns the manifest JSON of m as Sign writes it, as a generic
// map for a test to tamper with.
func payloadOf(t testing.TB, m *Manifest) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// mustJSON encodes v.
func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
