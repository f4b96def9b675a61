package wire

import (
	"fmt"
	"time"
)

// MeshKeys is the object of a ResourceMeshKeys key, since capability
// version 5: the keys of the memberlist mesh of one site (the nodes whose
// Node has the same SiteLabel), which the hub derives and puts in the view
// of each node of the site, and the edge keeps in its checkpoint so that
// its mesh still has them offline and after a reboot.
//
// Keys carries a schedule: each key is used from its From on. The hub
// sends the key of the period before, the current one and several ahead
// (see sync/view's MeshKeyPolicy), so that a node cut off from the hub
// goes on rotating with its site, on the same schedule, from what it
// holds. Ring says which keys the mesh uses at a time.
//
// Its key is MeshKeysKey(site). Its revision, in a Change, in the edge's
// Inventory and in Hello.Tokens, is not a store revision: it is the Unix
// second of its last key's From, which grows as the keys rotate. It is
// encoded with MarshalMeshKeys, not as Kubernetes protobuf: it is no API
// object.
type MeshKeys struct {
	// Site is the site's name, the value of its Nodes' SiteLabel.
	Site string
	// Keys are the site's keys, sorted by From, no two of the same From.
	Keys []MeshKey
}

// MeshKey is one key of a site's mesh.
type MeshKey struct {
	// From is when the key becomes the one the mesh encrypts with, in
	// whole seconds.
	From time.Time
	// Key is the AES-256 key, MeshKeySize bytes.
	Key []byte
}

// Limits of a MeshKeys object, which MarshalMeshKeys's callers keep to
// (Validate) and UnmarshalMeshKeys enforces, since it reads what came off
// the network and the disk.
const (
	MaxMeshKeysSize = 4 << 10
	MaxMeshKeys     = 16 // keys of one site
	MeshKeySize     = 32 // bytes of a key: AES-256, as memberlist takes it
	maxSiteLen      = 63 // a label value
)

// MeshKeysKey returns the key of the mesh keys of site: cluster-scoped,
// named by the site.
func MeshKeysKey(site string) Key {
	return Key{Resource: ResourceMeshKeys, Name: site}
}

// Validate reports, with an error wrapping ErrMalformed, a site that is
// not a non-empty label value, more than MaxMeshKeys keys, a key not
// MeshKeySize bytes long, and keys not sorted by From or two of one From.
func (k *MeshKeys) Validate() error {
	if err := checkSite(k.Site); err != nil {
		return err
	}
	if len(k.Keys) > MaxMeshKeys {
		return fmt.Errorf("%w: %d mesh keys of site %q, over %d", ErrMalformed, len(k.Keys), k.Site, MaxMeshKeys)
	}
	for i, mk := range k.Keys {
		if len(mk.Key) != MeshKeySize {
			return fmt.Errorf("%w: mesh key %d of site %q has %d bytes, not %d", ErrMalformed, i, k.Site, len(mk.Key), MeshKeySize)
		}
		if i > 0 && !k.Keys[i-1].From.Before(mk.From) {
			return fmt.Errorf("%w: mesh keys of site %q not sorted by their start, or two of one start", ErrMalformed, k.Site)
		}
	}
	return nil
}

// checkSite reports a site that is not a non-empty label value: at most
// 63 bytes of letters, digits, '-', '_' and '.', beginning and ending
// with a letter or digit.
func checkSite(site string) error {
	ok := site != "" && len(site) <= maxSiteLen && alnum(site[0]) && alnum(site[len(site)-1])
	for i := 0; ok && i < len(site); i++ {
		c := site[i]
		ok = alnum(c) || c == '-' || c == '_' || c == '.'
	}
	if !ok {
		return fmt.Errorf("%w: site %q is not a label value", ErrMalformed, site)
	}
	return nil
}

func alnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Ring returns the keys the mesh uses at now, for memberlist's keyring,
// primary first: the primary is the key with the latest From at or before
// now (the earliest key when all are ahead); then the key before it, which
// is still accepted while the site switches, for nodes whose clock or view
// lags; then every later key, installed before it is used, so that nodes
// that switch at slightly different times lose no message. Older keys are
// dropped. A node past all of its keys (cut off from the hub for longer
// than they reach) keeps the last one. Ring returns nil for no keys. The
// slices alias k's keys: the caller must not modify them.
func (k *MeshKeys) Ring(now time.Time) [][]byte {
	if len(k.Keys) == 0 {
		return nil
	}
	p := 0
	for i, mk := range k.Keys {
		if !mk.From.After(now) {
			p = i
		}
	}
	ring := make([][]byte, 0, len(k.Keys)-max(p-1, 0))
	ring = append(ring, k.Keys[p].Key)
	if p > 0 {
		ring = append(ring, k.Keys[p-1].Key)
	}
	for _, mk := range k.Keys[p+1:] {
		ring = append(ring, mk.Key)
	}
	return ring
}

// MarshalMeshKeys returns the encoding of k, which the caller checks with
// Validate first.
func MarshalMeshKeys(k *MeshKeys) []byte {
	var e enc
	e.string(1, k.Site)
	for _, mk := range k.Keys {
		e.message(2, func(e *enc) {
			e.uint(1, unixSeconds(mk.From))
			e.bytes(2, mk.Key)
		})
	}
	return e.b
}

// UnmarshalMeshKeys decodes what MarshalMeshKeys encodes, which it does
// not retain. It refuses, with an error wrapping ErrMalformed, input over
// MaxMeshKeysSize and what Validate refuses.
func UnmarshalMeshKeys(b []byte) (*MeshKeys, error) {
	if len(b) > MaxMeshKeysSize {
		return nil, fmt.Errorf("%w: mesh keys of %d bytes, over the %d-byte limit", ErrMalformed, len(b), MaxMeshKeysSize)
	}
	k := &MeshKeys{}
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			k.Site, err = f.str()
		case 2:
			if len(k.Keys) == MaxMeshKeys {
				return fmt.Errorf("%w: more than %d mesh keys", ErrMalformed, MaxMeshKeys)
			}
			var body []byte
			if body, err = f.sub(); err != nil {
				return err
			}
			var mk MeshKey
			if mk, err = decodeMeshKey(body); err != nil {
				return err
			}
			k.Keys = append(k.Keys, mk)
		}
		return err
	})
	if err == nil {
		err = k.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("decode mesh keys: %w", err)
	}
	return k, nil
}

func decodeMeshKey(b []byte) (MeshKey, error) {
	var mk MeshKey
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			mk.From, err = f.unixTime()
		case 2:
			mk.Key, err = f.bytes()
		}
		return err
	})
	return mk, err
}
