// Package trust reads and writes the hub's set of trusted release keys,
// kept in the ConfigMap Namespace/Name: an entry "threshold" and one entry
// "<keyid>.pub" per key, its PEM public key. The hub verifies uploaded
// releases against it and hands it to nodes, which keep it; `outpost
// release trust` edits it.
//
// It imports the standard library and firmware/manifest only, so both the
// hub and the edge agent may use it.
package trust

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// The ConfigMap that holds the trust set.
const (
	Namespace = "kube-system"
	Name      = "outpost-firmware-trust"
)

// ThresholdKey is the ConfigMap entry that holds the threshold, a
// decimal from 1 to the number of keys; absent means 1.
const ThresholdKey = "threshold"

// KeySuffix ends the entry of each key, named by its manifest.KeyID.
const KeySuffix = ".pub"

// Limits on what ParseTrust reads.
const (
	// MaxKeys is the most keys a trust set holds.
	MaxKeys = 32
	// MaxEntryBytes bounds each entry; an ed25519 PEM public key is 113.
	MaxEntryBytes = 1024
)

// ErrInvalid is what every error of ParseTrust wraps.
var ErrInvalid = errors.New("invalid firmware trust set")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ParseTrust decodes the data of the trust ConfigMap. Every entry other
// than ThresholdKey must be "<keyid>.pub" holding the PEM public key whose
// manifest.KeyID is keyid; the threshold must be 1..len(keys), and there
// must be no threshold without keys. Empty data (or none) is the empty
// trust set, which trusts no release. Keys are returned sorted by id.
func ParseTrust(data map[string]string) (manifest.Trust, error) {
	if len(data) > MaxKeys+1 {
		return manifest.Trust{}, invalid("%d entries, over %d keys and a threshold", len(data), MaxKeys)
	}
	ids := make([]string, 0, len(data))
	for k, v := range data {
		if len(v) > MaxEntryBytes {
			return manifest.Trust{}, invalid("entry %q is %d bytes, over %d", trunc(k), len(v), MaxEntryBytes)
		}
		if k != ThresholdKey {
			ids = append(ids, k)
		}
	}
	slices.Sort(ids)
	var t manifest.Trust
	for _, k := range ids {
		id, ok := strings.CutSuffix(k, KeySuffix)
		if !ok {
			return manifest.Trust{}, invalid("entry %q is neither %q nor <keyid>%s", trunc(k), ThresholdKey, KeySuffix)
		}
		pub, err := manifest.ParsePublicKey([]byte(data[k]))
		if err != nil {
			return manifest.Trust{}, invalid("entry %q: %v", trunc(k), err)
		}
		if got := manifest.KeyID(pub); got != id {
			return manifest.Trust{}, invalid("entry %q holds the key of id %s", trunc(k), got)
		}
		t.Keys = append(t.Keys, pub)
	}
	s, ok := data[ThresholdKey]
	switch {
	case !ok && len(t.Keys) == 0:
		return t, nil
	case !ok:
		t.Threshold = 1
		return t, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > len(t.Keys) {
		return manifest.Trust{}, invalid("threshold %q, want 1 to the number of keys (%d)", trunc(s), len(t.Keys))
	}
	t.Threshold = n
	return t, nil
}

// Data encodes t as the ConfigMap's data, which ParseTrust reads back. A
// key listed twice is written once; the threshold must be 1..the number
// of distinct keys (0 means 1), or 0 with no keys, which encodes as empty
// data.
func Data(t manifest.Trust) (map[string]string, error) {
	data := make(map[string]string, len(t.Keys)+1)
	for _, k := range t.Keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, invalid("a key of %d bytes", len(k))
		}
		pem, err := manifest.MarshalPublicKey(k)
		if err != nil {
			return nil, err
		}
		data[manifest.KeyID(k)+KeySuffix] = string(pem)
	}
	n := len(data)
	if n > MaxKeys {
		return nil, invalid("%d keys, over %d", n, MaxKeys)
	}
	th := t.Threshold
	if th == 0 && n > 0 {
		th = 1
	}
	if th < 0 || th > n {
		return nil, invalid("threshold %d with %d keys, want 1 to the number of keys", th, n)
	}
	if n > 0 {
		data[ThresholdKey] = strconv.Itoa(th)
	}
	return data, nil
}

// KeyIDs returns the ids of t's keys, sorted, each once.
func KeyIDs(t manifest.Trust) []string {
	ids := make([]string, 0, len(t.Keys))
	for _, k := range t.Keys {
		ids = append(ids, manifest.KeyID(k))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
