package manifest

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

// TestSignAndAddSignature checks signing by one signer, then a second,
// reaching a threshold of two, and the signer's own refusals.
func TestSignAndAddSignature(t *testing.T) {
	pubA, privA := testKey(1)
	pubB, privB := testKey(2)
	m := testManifest(t)
	trust := Trust{Keys: []ed25519.PublicKey{pubA, pubB}, Threshold: 2}
	opts := VerifyOptions{Now: testNow}

	env := sign(t, m, privA)
	if _, err := Verify(env, trust, opts); ReasonOf(err) != NotEnoughSignatures {
		t.Fatalf("Verify(one of two) = %v, want NotEnoughSignatures", err)
	}
	env2, err := AddSignature(env, privB)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Verify(env2, trust, opts)
	if err != nil {
		t.Fatalf("Verify(two of two) = %v", err)
	}
	if !got.Created.Equal(m.Created) || got.Components[0].Chunks[2] != m.Components[0].Chunks[2] {
		t.Errorf("Verify() = %+v, want the signed manifest", got)
	}
	if _, err := AddSignature(env2, privA); err == nil || !strings.Contains(err.Error(), "already signed") {
		t.Errorf("AddSignature(same key again) = %v, want already signed", err)
	}
	if _, err := AddSignature([]byte("{"), privA); ReasonOf(err) != Malformed {
		t.Errorf("AddSignature(garbage) = %v, want Malformed", err)
	}
	if _, err := AddSignature(signRaw(t, []byte(`{"name":"x"}`), privA), privB); ReasonOf(err) != Invalid {
		t.Errorf("AddSignature(invalid manifest) = %v, want Invalid", err)
	}
	var many []ed25519.PrivateKey
	for i := range MaxSignatures {
		_, k := testKey(byte(100 + i))
		many = append(many, k)
	}
	full := sign(t, m, many...)
	if _, err := AddSignature(full, privA); err == nil {
		t.Errorf("AddSignature(%d signatures) = nil error", MaxSignatures)
	}

	bad := *m
	bad.Version = "latest"
	for name, call := range map[string]func() ([]byte, error){
		"no key":           func() ([]byte, error) { return Sign(m) },
		"too many keys":    func() ([]byte, error) { return Sign(m, append(many, privA)...) },
		"same key twice":   func() ([]byte, error) { return Sign(m, privA, privA) },
		"short key":        func() ([]byte, error) { return Sign(m, privA[:10]) },
		"invalid manifest": func() ([]byte, error) { return Sign(&bad, privA) },
	} {
		if _, err := call(); err == nil {
			t.Errorf("Sign(%s) = nil error", name)
		}
	}
}

// TestSignTooLarge checks that a signer refuses to write an envelope every
// node would refuse.
func TestSignTooLarge(t *testing.T) {
	_, priv := testKey(1)
	m := testManifest(t)
	c := m.Components[0]
	c.Size = MaxChunks * MinChunkSize
	c.Chunks = make([]string, MaxChunks)
	for i := range c.Chunks {
		c.Chunks[i] = c.SHA256
	}
	m.Components[0] = c
	if _, err := Sign(m, priv); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("Sign(huge manifest) = %v, want over the limit", err)
	}
}

// TestKeyID checks the key id's form and stability.
func TestKeyID(t *testing.T) {
	pub, _ := testKey(1)
	id := KeyID(pub)
	if !isKeyID(id) || id != KeyID(append(ed25519.PublicKey(nil), pub...)) {
		t.Errorf("KeyID() = %q, want 16 stable lowercase hex digits", id)
	}
	other, _ := testKey(2)
	if KeyID(other) == id {
		t.Error("two keys share a key id")
	}
}
