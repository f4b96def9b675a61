package trust

import (
	"crypto/ed25519"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

func key(t testing.TB) (ed25519.PublicKey, string) {
	pub, _, err := manifest.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := manifest.MarshalPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pub, string(pem)
}

func TestRoundTrip(t *testing.T) {
	a, _ := key(t)
	b, _ := key(t)
	for _, in := range []manifest.Trust{{}, {Keys: []ed25519.PublicKey{a}, Threshold: 1}, {Keys: []ed25519.PublicKey{a, b, a}, Threshold: 2}} {
		data, err := Data(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseTrust(data)
		if err != nil {
			t.Fatalf("ParseTrust(Data(%v)): %v", in, err)
		}
		if !reflect.DeepEqual(KeyIDs(got), KeyIDs(in)) || got.Threshold != in.Threshold {
			t.Fatalf("ParseTrust(Data(%v)) = %v", in, got)
		}
	}
	if _, err := Data(manifest.Trust{Keys: []ed25519.PublicKey{a}, Threshold: 2}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Data with a threshold over the keys: %v", err)
	}
}

func TestParseTrust(t *testing.T) {
	a, pemA := key(t)
	_, pemB := key(t)
	idA := manifest.KeyID(a)
	tests := []struct {
		name      string
		data      map[string]string
		threshold int
		keys      int
		wantErr   string
	}{
		{"empty", nil, 0, 0, ""},
		{"one key, no threshold", map[string]string{idA + ".pub": pemA}, 1, 1, ""},
		{"threshold 1", map[string]string{idA + ".pub": pemA, "threshold": "1"}, 1, 1, ""},
		{"threshold over keys", map[string]string{idA + ".pub": pemA, "threshold": "2"}, 0, 0, "threshold"},
		{"threshold zero", map[string]string{idA + ".pub": pemA, "threshold": "0"}, 0, 0, "threshold"},
		{"threshold not a number", map[string]string{idA + ".pub": pemA, "threshold": "one"}, 0, 0, "threshold"},
		{"threshold without keys", map[string]string{"threshold": "1"}, 0, 0, "threshold"},
		{"wrong id", map[string]string{idA + ".pub": pemB}, 0, 0, "key of id"},
		{"not a key", map[string]string{idA + ".pub": "hello"}, 0, 0, "PEM"},
		{"stray entry", map[string]string{idA + ".pub": pemA, "notes": "x"}, 0, 0, "neither"},
		{"oversized entry", map[string]string{idA + ".pub": pemA + strings.Repeat(" ", MaxEntryBytes)}, 0, 0, "over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTrust(tt.data)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTrust = %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Threshold != tt.threshold || len(got.Keys) != tt.keys {
				t.Fatalf("ParseTrust = %v, %v; want %d keys, threshold %d", got, err, tt.keys, tt.threshold)
			}
		})
	}
	many := map[string]string{}
	for i := range MaxKeys + 2 {
		many[strings.Repeat("x", i)] = ""
	}
	if _, err := ParseTrust(many); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ParseTrust of %d entries: %v", len(many), err)
	}
}

func FuzzParseTrust(f *testing.F) {
	a, pemA := key(f)
	f.Add(manifest.KeyID(a)+".pub", pemA, "1")
	f.Add("threshold", "2", "")
	f.Add("x.pub", "-----BEGIN PUBLIC KEY-----\n", "0")
	f.Fuzz(func(t *testing.T, k, v, threshold string) {
		data := map[string]string{k: v}
		if k != ThresholdKey {
			data[ThresholdKey] = threshold
		}
		got, err := ParseTrust(data)
		if err != nil {
			return
		}
		if len(got.Keys) > 0 && (got.Threshold < 1 || got.Threshold > len(got.Keys)) {
			t.Fatalf("ParseTrust(%q) = threshold %d with %d keys", data, got.Threshold, len(got.Keys))
		}
		back, err := Data(got)
		if err != nil {
			t.Fatalf("Data of a parsed trust set: %v", err)
		}
		again, err := ParseTrust(back)
		if err != nil || !reflect.DeepEqual(KeyIDs(again), KeyIDs(got)) || again.Threshold != got.Threshold {
			t.Fatalf("round trip of %v = %v, %v", got, again, err)
		}
	})
}
