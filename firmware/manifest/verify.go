package manifest

import (
	"bytes"
	"crypto/ed25519"
	"time"
)

// Trust is what a node trusts: release public keys and how many of them
// must sign.
type Trust struct {
	// Keys are the trusted ed25519 public keys. During a key rotation both
	// the old and the new key are listed.
	Keys []ed25519.PublicKey
	// Threshold is how many distinct trusted keys must sign; 0 means 1.
	// A key listed twice counts once.
	Threshold int
}

// VerifyOptions are the node's side of a verification.
type VerifyOptions struct {
	// Now is the node's clock; zero means time.Now().
	Now time.Time
	// OS, Arch and Variant are the node's platform (GOOS, GOARCH, GOARM).
	// At least one component must be for it. With OS and Arch both empty
	// the platform is not checked, as when the hub verifies an upload.
	OS, Arch, Variant string
	// HighestCommitted is the highest version the node has committed, ""
	// if none: a lower version is refused unless AllowDowngradeFrom
	// covers it.
	HighestCommitted string
}

// Verify decides whether a node may install the release in envelope, and
// returns its manifest if so. The checks run in this order, and the first
// failure is returned as an *Error:
//
//  1. size (TooLarge), before anything is decoded;
//  2. envelope decoding (Malformed, TooLarge);
//  3. signatures over the exact payload bytes (UnknownKey, BadSignature,
//     NotEnoughSignatures), before any byte of the payload is interpreted;
//  4. manifest decoding and content (Malformed, TooLarge, Invalid);
//  5. expiry (Expired);
//  6. platform (WrongPlatform);
//  7. downgrade (Downgrade).
func Verify(envelope []byte, trust Trust, opts VerifyOptions) (*Manifest, error) {
	if len(envelope) > MaxEnvelopeBytes {
		return nil, refuse(TooLarge, "envelope is %d bytes, over %d", len(envelope), MaxEnvelopeBytes)
	}
	env, err := DecodeEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	if err := checkSignatures(env, trust); err != nil {
		return nil, err
	}
	m, err := DecodeManifest(env.Payload)
	if err != nil {
		return nil, err
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	if !now.Before(m.Expires) {
		return nil, refuse(Expired, "release %s %s expired at %s", m.Name, m.Version, m.Expires.Format(time.RFC3339))
	}
	if err := checkPlatform(m, opts); err != nil {
		return nil, err
	}
	if err := checkDowngrade(m, opts.HighestCommitted); err != nil {
		return nil, err
	}
	return m, nil
}

// trustedKeys maps the KeyIDs of trust's keys to the keys, dropping
// duplicates, and returns the effective threshold.
func trustedKeys(trust Trust) (map[string]ed25519.PublicKey, int, error) {
	keys := make(map[string]ed25519.PublicKey, len(trust.Keys))
	for i, k := range trust.Keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, 0, refuse(UnknownKey, "trusted key %d is %d bytes, not an ed25519 public key", i, len(k))
		}
		id := KeyID(k)
		if old, ok := keys[id]; ok && !bytes.Equal(old, k) {
			return nil, 0, refuse(UnknownKey, "trusted keys %s collide on their key id", id)
		}
		keys[id] = k
	}
	if len(keys) == 0 {
		return nil, 0, refuse(UnknownKey, "the node trusts no release key")
	}
	threshold := max(trust.Threshold, 1)
	return keys, threshold, nil
}

// checkSignatures checks env's signatures against trust. Every signature
// attributed to a trusted key must verify: one that does not means the
// envelope was tampered with, and it is refused even if enough others
// verify. Signatures by keys the node does not trust are ignored.
func checkSignatures(env *Envelope, trust Trust) error {
	keys, threshold, err := trustedKeys(trust)
	if err != nil {
		return err
	}
	if len(env.Signatures) == 0 {
		return refuse(NotEnoughSignatures, "the envelope carries no signature")
	}
	msg := signedMessage(env.Payload)
	good := make(map[string]bool, len(env.Signatures))
	for _, s := range env.Signatures {
		pub, ok := keys[s.KeyID]
		if !ok {
			continue
		}
		if !ed25519.Verify(pub, msg, s.Sig) {
			return refuse(BadSignature, "signature by key %s does not verify", s.KeyID)
		}
		good[s.KeyID] = true
	}
	switch {
	case len(good) == 0:
		return refuse(UnknownKey, "no signature is by a trusted key (%d signatures)", len(env.Signatures))
	case len(good) < threshold:
		return refuse(NotEnoughSignatures, "%d trusted keys signed, %d required", len(good), threshold)
	}
	return nil
}

// checkPlatform refuses a manifest with no component for the node.
func checkPlatform(m *Manifest, opts VerifyOptions) error {
	if opts.OS == "" && opts.Arch == "" {
		return nil
	}
	for i := range m.Components {
		if m.Components[i].For(opts.OS, opts.Arch, opts.Variant) {
			return nil
		}
	}
	p := opts.OS + "/" + opts.Arch
	if opts.Variant != "" {
		p += "/v" + opts.Variant
	}
	return refuse(WrongPlatform, "release %s %s has no component for %s", m.Name, m.Version, p)
}

// checkDowngrade refuses a version below highest unless the manifest's
// AllowDowngradeFrom is at or above highest.
func checkDowngrade(m *Manifest, highest string) error {
	if highest == "" {
		return nil
	}
	h, err := parseVersion(highest)
	if err != nil {
		return refuse(Downgrade, "the node's highest committed version: %v", err)
	}
	v, _ := parseVersion(m.Version) // validated
	if v.compare(h) >= 0 {
		return nil
	}
	if m.AllowDowngradeFrom != "" {
		from, _ := parseVersion(m.AllowDowngradeFrom) // validated
		if h.compare(from) <= 0 {
			return nil
		}
		return refuse(Downgrade, "version %s is below committed %s, and allowDowngradeFrom %s does not cover it", m.Version, highest, m.AllowDowngradeFrom)
	}
	return refuse(Downgrade, "version %s is below committed %s", m.Version, highest)
}
