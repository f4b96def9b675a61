package manifest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// PayloadType names the payload of an Envelope; any other is refused.
const PayloadType = "application/vnd.outpost.firmware.manifest.v1+json"

// signingPrefix separates the domain of these signatures: a key that signs
// firmware manifests signs prefix+payload, so no signature made by that key
// for anything else can pass for a manifest's, and the reverse.
const signingPrefix = "outpost firmware manifest v1\n"

// Envelope carries the exact manifest bytes that were signed and the
// signatures over them. Nothing is re-encoded between signing and
// verifying: the node checks the signatures over Payload, then decodes it.
type Envelope struct {
	// PayloadType is always PayloadType.
	PayloadType string `json:"payloadType"`
	// Payload is the manifest's JSON (base64 in the envelope's JSON).
	Payload []byte `json:"payload"`
	// Signatures are 1..MaxSignatures signatures over Payload.
	Signatures []Signature `json:"signatures"`
}

// Signature is one ed25519 signature over signingPrefix+Payload.
type Signature struct {
	// KeyID is the signer's KeyID, a hint telling which trusted key to
	// check the signature with.
	KeyID string `json:"keyid"`
	// Sig is the 64-byte ed25519 signature.
	Sig []byte `json:"sig"`
}

// KeyID returns the short stable id of a public key: the lowercase hex of
// the first 8 bytes of its sha256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// signedMessage returns what a signature covers.
func signedMessage(payload []byte) []byte {
	msg := make([]byte, 0, len(signingPrefix)+len(payload))
	return append(append(msg, signingPrefix...), payload...)
}

// ReadEnvelope reads an envelope from r, at most MaxEnvelopeBytes: more is
// an *Error of Reason TooLarge, read no further than one byte past the
// limit.
func ReadEnvelope(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxEnvelopeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read envelope: %w", err)
	}
	if len(data) > MaxEnvelopeBytes {
		return nil, refuse(TooLarge, "envelope is over %d bytes", MaxEnvelopeBytes)
	}
	return data, nil
}

// DecodeEnvelope decodes an envelope's JSON and checks its structure
// (payload type, signature count and sizes, key id spelling), not its
// signatures. Errors are *Error: TooLarge, Malformed.
func DecodeEnvelope(data []byte) (*Envelope, error) {
	if len(data) > MaxEnvelopeBytes {
		return nil, refuse(TooLarge, "envelope is %d bytes, over %d", len(data), MaxEnvelopeBytes)
	}
	var env Envelope
	if err := decodeStrict(data, envelopeShape, &env, "envelope"); err != nil {
		return nil, err
	}
	if err := env.check(); err != nil {
		return nil, refuse(Malformed, "envelope: %v", err)
	}
	return &env, nil
}

// check checks an envelope's structure.
func (env *Envelope) check() error {
	if env.PayloadType != PayloadType {
		return fmt.Errorf("payload type %q, want %q", env.PayloadType, PayloadType)
	}
	if len(env.Payload) == 0 {
		return errors.New("empty payload")
	}
	if len(env.Signatures) > MaxSignatures {
		return fmt.Errorf("%d signatures, over %d", len(env.Signatures), MaxSignatures)
	}
	for i, s := range env.Signatures {
		if !isKeyID(s.KeyID) {
			return fmt.Errorf("signature %d: key id %q is not 16 lowercase hex digits", i, s.KeyID)
		}
		if len(s.Sig) != ed25519.SignatureSize {
			return fmt.Errorf("signature %d: %d bytes, want %d", i, len(s.Sig), ed25519.SignatureSize)
		}
	}
	return nil
}

// isKeyID reports whether s is spelled as KeyID spells ids.
func isKeyID(s string) bool {
	return len(s) == 16 && isHexDigest(s+s+s+s)
}

// Sign validates m, encodes it and returns the JSON of an envelope signed
// by each key (at least one, at most MaxSignatures, distinct). m is not
// modified; its times are written in UTC.
func Sign(m *Manifest, keys ...ed25519.PrivateKey) ([]byte, error) {
	if len(keys) == 0 || len(keys) > MaxSignatures {
		return nil, fmt.Errorf("sign: %d keys, want 1..%d", len(keys), MaxSignatures)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	c := *m
	c.Created, c.Expires = c.Created.UTC(), c.Expires.UTC()
	payload, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("sign: encode manifest: %w", err)
	}
	// Decode what is about to be signed, as a node will: a signer must
	// never sign bytes that a node would refuse or read differently.
	if _, err := DecodeManifest(payload); err != nil {
		return nil, fmt.Errorf("sign: encoded manifest does not decode: %w", err)
	}
	env := &Envelope{PayloadType: PayloadType, Payload: payload}
	for _, k := range keys {
		if err := env.sign(k); err != nil {
			return nil, err
		}
	}
	return env.encode()
}

// AddSignature returns envelope with one more signature, by key, for a
// second signer. The payload must decode to a valid manifest; the existing
// signatures are kept as they are and not checked.
func AddSignature(envelope []byte, key ed25519.PrivateKey) ([]byte, error) {
	env, err := DecodeEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	if _, err := DecodeManifest(env.Payload); err != nil {
		return nil, fmt.Errorf("add signature: %w", err)
	}
	if len(env.Signatures) == MaxSignatures {
		return nil, fmt.Errorf("add signature: already %d signatures", MaxSignatures)
	}
	if err := env.sign(key); err != nil {
		return nil, err
	}
	return env.encode()
}

// sign appends key's signature over env's payload, refusing a key that
// already signed.
func (env *Envelope) sign(key ed25519.PrivateKey) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("sign: private key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	id := KeyID(key.Public().(ed25519.PublicKey))
	for _, s := range env.Signatures {
		if s.KeyID == id {
			return fmt.Errorf("sign: key %s already signed", id)
		}
	}
	sig := ed25519.Sign(key, signedMessage(env.Payload))
	env.Signatures = append(env.Signatures, Signature{KeyID: id, Sig: sig})
	return nil
}

// encode returns env's JSON, refusing one a node would refuse as too large.
func (env *Envelope) encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(env); err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	if buf.Len() > MaxEnvelopeBytes {
		return nil, fmt.Errorf("envelope is %d bytes, over %d: use fewer or larger chunks", buf.Len(), MaxEnvelopeBytes)
	}
	return buf.Bytes(), nil
}
