package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func samplePodTokens() *PodTokens {
	iat := time.Unix(1796169600, 0).UTC()
	return &PodTokens{Pod: "web-1", Tokens: []PodToken{
		{Volume: AutomountVolume, Path: "token", Audiences: []string{"https://kubernetes.default.svc.cluster.local"}, Token: "eyJhbGciOiJFUzI1NiJ9.e30.sig", IssuedAt: iat, Expiry: iat.Add(7 * 24 * time.Hour)},
		{Volume: "vault", Path: "vault/token", Audiences: []string{"vault", "other"}, Token: "eyJ.vault.sig", IssuedAt: iat, Expiry: iat.Add(7 * 24 * time.Hour)},
	}}
}

func TestPodTokensRoundTrip(t *testing.T) {
	for _, p := range []*PodTokens{samplePodTokens(), {Pod: "empty"}} {
		got, err := UnmarshalPodTokens(MarshalPodTokens(p))
		if err != nil {
			t.Fatalf("UnmarshalPodTokens(MarshalPodTokens(%+v)) = %v", p, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("UnmarshalPodTokens(MarshalPodTokens(p)) = %+v, want %+v", got, p)
		}
	}
	p := samplePodTokens()
	if tok, ok := p.Find("vault", "vault/token"); !ok || tok.Token != "eyJ.vault.sig" {
		t.Errorf("Find(vault, vault/token) = %+v, %v", tok, ok)
	}
	if _, ok := p.Find("vault", "token"); ok {
		t.Error("Find(vault, token) found a token of another path")
	}
}

func TestPodTokensMalformed(t *testing.T) {
	many := &PodTokens{Pod: "p"}
	for range MaxPodTokens + 1 {
		many.Tokens = append(many.Tokens, PodToken{Path: "t", Token: "x"})
	}
	var noPath enc
	noPath.message(2, func(e *enc) { e.string(4, "jwt") })
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"too large", make([]byte, MaxPodTokensSize+1)},
		{"too many tokens", MarshalPodTokens(many)},
		{"token without a path", noPath.b},
		{"truncated", MarshalPodTokens(samplePodTokens())[:40]},
		{"varint where a message", []byte{0x10, 0x01}},
	} {
		if _, err := UnmarshalPodTokens(tc.b); !errors.Is(err, ErrMalformed) {
			t.Errorf("UnmarshalPodTokens(%s) = %v, want ErrMalformed", tc.name, err)
		}
	}
}

// FuzzUnmarshalPodTokens feeds arbitrary bytes to the decoder of the
// objects the edge keeps on disk: it must return tokens or an error,
// never panic, and what it decodes must encode back to the same.
func FuzzUnmarshalPodTokens(f *testing.F) {
	f.Add(MarshalPodTokens(samplePodTokens()))
	f.Add([]byte{})
	f.Add([]byte(strings.Repeat("\x12\x00", 10)))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := UnmarshalPodTokens(b)
		if err != nil {
			return
		}
		again, err := UnmarshalPodTokens(MarshalPodTokens(p))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("re-decode = %+v, want %+v", again, p)
		}
		if !bytes.Equal(MarshalPodTokens(again), MarshalPodTokens(p)) {
			t.Fatal("encoding is not stable")
		}
	})
}
