package firmwarerelease

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
)

type stater map[string]int64

func (s stater) Stat(d string) (int64, bool) { n, ok := s[d]; return n, ok }

var testNow = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func release(t *testing.T, keys ...ed25519.PrivateKey) (*firmwarev1.Release, *manifest.Manifest) {
	t.Helper()
	c, err := manifest.BuildComponent("config", manifest.KindFile, "", "", "", bytes.NewReader([]byte("config bytes")), 0)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{Name: "r", Version: "1.2.0", Components: []manifest.Component{c}, Created: testNow.Add(-time.Hour), Expires: testNow.Add(time.Hour)}
	env, err := manifest.Sign(m, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return &firmwarev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Generation: 3},
		Spec:       firmwarev1.ReleaseSpec{Version: m.Version, Envelope: env, Components: SpecComponents(m)},
	}, m
}

func key(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := manifest.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func cond(st firmwarev1.ReleaseStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func TestDecide(t *testing.T) {
	pubA, privA := key(t)
	pubB, privB := key(t)
	rel, m := release(t, privA, privB)
	full := stater{m.Components[0].SHA256: m.Components[0].Size}
	short := stater{m.Components[0].SHA256: m.Components[0].Size - 1}
	mismatched := rel.DeepCopy()
	mismatched.Spec.Version = "9.9.9"
	tests := []struct {
		name              string
		rel               *firmwarev1.Release
		in                Input
		verified, vreason string
		stored, sreason   string
		keyIDs            int
		recheck           bool
	}{
		{"verified and stored", rel, Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{pubA, pubB}, Threshold: 2}, Store: full, Now: testNow},
			"True", ReasonVerified, "True", ReasonStored, 2, true},
		{"one of two trusted", rel, Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{pubA}}, Store: short, Now: testNow},
			"True", ReasonVerified, "False", ReasonMissing, 1, true},
		{"no trust", rel, Input{Store: full, Now: testNow}, "False", ReasonNoTrust, "True", ReasonStored, 0, false},
		{"unknown key", rel, Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{mustKey(t)}}, Store: stater{}, Now: testNow},
			"False", string(manifest.UnknownKey), "False", ReasonMissing, 0, false},
		{"threshold", rel, Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{pubA, mustKey(t)}, Threshold: 2}, Store: full, Now: testNow},
			"False", string(manifest.NotEnoughSignatures), "True", ReasonStored, 0, false},
		{"expired", rel, Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{pubA}}, Store: full, Now: testNow.Add(2 * time.Hour)},
			"False", string(manifest.Expired), "True", ReasonStored, 0, false},
		{"trust unreadable", rel, Input{TrustErr: errors.New("bad"), Store: full, Now: testNow}, "Unknown", ReasonTrustInvalid, "True", ReasonStored, 0, false},
		{"spec lies", mismatched, Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{pubA}}, Store: full, Now: testNow},
			"False", ReasonSpecMismatch, "True", ReasonStored, 0, false},
		{"garbage", &firmwarev1.Release{Spec: firmwarev1.ReleaseSpec{Envelope: []byte("{")}}, Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{pubA}}, Store: full, Now: testNow},
			"False", string(manifest.Malformed), "False", ReasonUnreadable, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, recheck := Decide(tt.rel, tt.in)
			v, s := cond(st, firmwarev1.ReleaseVerified), cond(st, firmwarev1.ReleaseArtifactsStored)
			if string(v.Status) != tt.verified || v.Reason != tt.vreason {
				t.Errorf("Verified = %s %s (%s), want %s %s", v.Status, v.Reason, v.Message, tt.verified, tt.vreason)
			}
			if string(s.Status) != tt.stored || s.Reason != tt.sreason {
				t.Errorf("ArtifactsStored = %s %s (%s), want %s %s", s.Status, s.Reason, s.Message, tt.stored, tt.sreason)
			}
			if len(st.KeyIDs) != tt.keyIDs {
				t.Errorf("KeyIDs = %v, want %d", st.KeyIDs, tt.keyIDs)
			}
			if !recheck.IsZero() != tt.recheck || tt.recheck && !recheck.Equal(m.Expires) {
				t.Errorf("recheck = %v, want the expiry: %v", recheck, tt.recheck)
			}
			if st.ObservedGeneration != tt.rel.Generation {
				t.Errorf("ObservedGeneration = %d", st.ObservedGeneration)
			}
		})
	}
}

// TestDecideKeepsTransitionTime: a status decided again with nothing
// changed is equal to the last, so the controller writes nothing.
func TestDecideKeepsTransitionTime(t *testing.T) {
	pub, priv := key(t)
	rel, m := release(t, priv)
	in := Input{Trust: manifest.Trust{Keys: []ed25519.PublicKey{pub}}, Store: stater{m.Components[0].SHA256: m.Components[0].Size}, Now: testNow}
	st, _ := Decide(rel, in)
	rel.Status = st
	in.Now = testNow.Add(time.Minute)
	again, _ := Decide(rel, in)
	for i := range again.Conditions {
		if !again.Conditions[i].LastTransitionTime.Equal(&st.Conditions[i].LastTransitionTime) {
			t.Fatalf("condition %s moved its transition time", again.Conditions[i].Type)
		}
	}
}

func mustKey(t *testing.T) ed25519.PublicKey {
	pub, _ := key(t)
	return pub
}
