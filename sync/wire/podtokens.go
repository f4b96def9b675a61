package wire

import (
	"fmt"
	"time"
)

// PodTokens is the object of a ResourcePodTokens key, since capability
// version 3: the service account tokens the hub minted for one pod of the
// node's view, bound to that pod and to the node, which the edge keeps in
// its checkpoint so that the pod has them offline and after a reboot.
//
// Its key is PodTokensKey(namespace, uid): by the pod's UID, not its name,
// so that a pod deleted and made again under the same name never gets the
// old pod's tokens (which the hub refuses), and what a node says it holds
// names the pod exactly. Its revision, in a Change, in the edge's
// Inventory and in Hello.Tokens, is not a store revision: it is the Unix
// time in seconds at which the hub means to mint the tokens again (see
// sync/view's TokenRefreshAt), which is all the hub needs to know of what
// a returning node holds.
//
// It is encoded with MarshalPodTokens, not as Kubernetes protobuf: it is
// no API object.
type PodTokens struct {
	// Pod is the pod's name.
	Pod string
	// Tokens are the pod's tokens, one per token source of its spec
	// (volume and path), sorted by volume, then path.
	Tokens []PodToken
}

// PodToken is one token of a pod, for one source of its spec.
type PodToken struct {
	// Volume is the name of the projected volume whose
	// serviceAccountToken source this is; AutomountVolume for the token
	// of the service account volume every pod gets unless it opts out
	// (upstream's kube-api-access-*, which admission would add).
	Volume string
	// Path is the file's path relative to the volume.
	Path string
	// Audiences are the token's audiences.
	Audiences []string
	// Token is the signed JWT.
	Token string
	// IssuedAt and Expiry are the token's iat and exp, in whole seconds:
	// its real life, which for a pod on a node outlasts the life its
	// source asked for (see hub/auth's EdgePodTokenLifetime).
	IssuedAt, Expiry time.Time
}

// AutomountVolume is the PodToken.Volume of the automounted service
// account token, mounted at /var/run/secrets/kubernetes.io/serviceaccount
// with the path "token". No volume of a pod's spec has an empty name.
const AutomountVolume = ""

// Limits of a PodTokens object, which MarshalPodTokens's callers keep to
// and UnmarshalPodTokens enforces, since it reads what came off the
// network and the disk: a token of the hub is under a kilobyte.
const (
	MaxPodTokensSize = 256 << 10
	MaxPodTokens     = 64 // tokens of one pod
)

// PodTokensKey returns the key of the tokens of the pod with uid in
// namespace.
func PodTokensKey(namespace, uid string) Key {
	return Key{Resource: ResourcePodTokens, Namespace: namespace, Name: uid}
}

// Find returns the token of volume and path, and whether there is one.
func (p *PodTokens) Find(volume, path string) (PodToken, bool) {
	for _, t := range p.Tokens {
		if t.Volume == volume && t.Path == path {
			return t, true
		}
	}
	return PodToken{}, false
}

// MarshalPodTokens returns the encoding of p.
func MarshalPodTokens(p *PodTokens) []byte {
	var e enc
	e.string(1, p.Pod)
	for _, t := range p.Tokens {
		e.message(2, func(e *enc) {
			e.string(1, t.Volume)
			e.string(2, t.Path)
			for _, a := range t.Audiences {
				e.string(3, a)
			}
			e.string(4, t.Token)
			e.uint(5, unixSeconds(t.IssuedAt))
			e.uint(6, unixSeconds(t.Expiry))
		})
	}
	return e.b
}

// unixSeconds returns t in Unix seconds, 0 for a time before 1970 (the
// zero time included).
func unixSeconds(t time.Time) uint64 {
	if s := t.Unix(); s > 0 {
		return uint64(s)
	}
	return 0
}

// UnmarshalPodTokens decodes what MarshalPodTokens encodes, which it does
// not retain. It refuses, with an error wrapping ErrMalformed, input over
// MaxPodTokensSize, more than MaxPodTokens tokens, and a token without
// its path or its JWT.
func UnmarshalPodTokens(b []byte) (*PodTokens, error) {
	if len(b) > MaxPodTokensSize {
		return nil, fmt.Errorf("%w: pod tokens of %d bytes, over the %d-byte limit", ErrMalformed, len(b), MaxPodTokensSize)
	}
	p := &PodTokens{}
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			p.Pod, err = f.str()
		case 2:
			if len(p.Tokens) == MaxPodTokens {
				return fmt.Errorf("%w: more than %d tokens of one pod", ErrMalformed, MaxPodTokens)
			}
			var body []byte
			if body, err = f.sub(); err != nil {
				return err
			}
			var t PodToken
			if t, err = decodePodToken(body); err != nil {
				return err
			}
			p.Tokens = append(p.Tokens, t)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decode pod tokens: %w", err)
	}
	return p, nil
}

func decodePodToken(b []byte) (PodToken, error) {
	var t PodToken
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			t.Volume, err = f.str()
		case 2:
			t.Path, err = f.str()
		case 3:
			var a string
			if a, err = f.str(); err == nil && a != "" { // no empty audience is written
				t.Audiences = append(t.Audiences, a)
			}
		case 4:
			t.Token, err = f.str()
		case 5:
			t.IssuedAt, err = f.unixTime()
		case 6:
			t.Expiry, err = f.unixTime()
		}
		return err
	})
	switch {
	case err != nil:
		return PodToken{}, err
	case t.Path == "" || t.Token == "":
		return PodToken{}, fmt.Errorf("%w: pod token of volume %q without its path or token", ErrMalformed, t.Volume)
	}
	return t, nil
}

// unixTime decodes Unix seconds; 0 is the zero time.
func (f field) unixTime() (time.Time, error) {
	v, err := f.revision() // the same range: non-negative, at most 2^62
	if err != nil || v == 0 {
		return time.Time{}, err
	}
	return time.Unix(v, 0).UTC(), nil
}
