package manifest

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestVerify checks the happy paths and every refusal reason of Verify.
func TestVerify(t *testing.T) {
	pubA, privA := testKey(1)
	pubB, privB := testKey(2)
	pubC, privC := testKey(3) // the new key of a rotation
	_, privX := testKey(9)    // a key nobody trusts

	m := testManifest(t)
	good := sign(t, m, privA)
	both := sign(t, m, privA, privB)
	arm64 := VerifyOptions{Now: testNow, OS: "linux", Arch: "arm64"}
	one := Trust{Keys: []ed25519.PublicKey{pubA}}
	two := Trust{Keys: []ed25519.PublicKey{pubA, pubB}, Threshold: 2}

	// with returns a signed copy of m changed by f.
	with := func(f func(*Manifest), keys ...ed25519.PrivateKey) []byte {
		c := *m
		c.Components = append([]Component(nil), m.Components...)
		f(&c)
		return sign(t, &c, keys...)
	}
	// tamper returns the good envelope with f applied to its decoded form.
	tamper := func(f func(*Envelope)) []byte {
		env := decodeEnvelope(t, good)
		f(env)
		return encodeEnvelope(t, env)
	}
	// raw returns an envelope of m's JSON changed by f and signed by A.
	raw := func(f func(map[string]any)) []byte {
		v := payloadOf(t, m)
		f(v)
		return signRaw(t, mustJSON(t, v), privA)
	}
	firstComponent := func(v map[string]any) map[string]any {
		return v["components"].([]any)[0].(map[string]any)
	}
	version := func(ver, from string) []byte {
		return with(func(c *Manifest) { c.Version, c.AllowDowngradeFrom = ver, from }, privA)
	}
	committed := func(v string) VerifyOptions {
		o := arm64
		o.HighestCommitted = v
		return o
	}

	// encoding/json would match "Version" to the field; the node must not.
	otherCase := signRaw(t, bytes.Replace(mustJSON(t, payloadOf(t, m)), []byte(`"version"`), []byte(`"Version"`), 1), privA)

	tests := []struct {
		name     string
		envelope []byte
		trust    Trust
		opts     VerifyOptions
		want     Reason // "" for success
	}{
		{"one key", good, one, arm64, ""},
		{"two keys threshold 2", both, two, arm64, ""},
		{"two signatures threshold 1", both, one, arm64, ""},
		{"rotation: old key, both trusted", good, Trust{Keys: []ed25519.PublicKey{pubA, pubC}}, arm64, ""},
		{"rotation: new key, both trusted", sign(t, m, privC), Trust{Keys: []ed25519.PublicKey{pubA, pubC}}, arm64, ""},
		{"rotation: new key, old trusted only", sign(t, m, privC), one, arm64, UnknownKey},
		{"untrusted extra signer ignored", sign(t, m, privA, privX), one, arm64, ""},
		{"armv7 node", good, one, VerifyOptions{Now: testNow, OS: "linux", Arch: "arm", Variant: "7"}, ""},
		{"hub: no platform", good, one, VerifyOptions{Now: testNow}, ""},
		{"zero Now is the wall clock", with(func(c *Manifest) { c.Expires = time.Now().Add(time.Hour) }, privA), one, VerifyOptions{}, ""},

		{"too large", append(good, bytes.Repeat([]byte(" "), MaxEnvelopeBytes)...), one, arm64, TooLarge},
		{"too many signatures", tamper(func(e *Envelope) {
			for len(e.Signatures) <= MaxSignatures {
				e.Signatures = append(e.Signatures, e.Signatures[0])
			}
		}), one, arm64, TooLarge},
		{"not JSON", []byte("not json"), one, arm64, Malformed},
		{"empty", nil, one, arm64, Malformed},
		{"trailing data", append(append([]byte(nil), good...), "{}"...), one, arm64, Malformed},
		{"unknown envelope field", bytes.Replace(good, []byte(`"payloadType"`), []byte(`"extra": 1, "payloadType"`), 1), one, arm64, Malformed},
		{"duplicate envelope field", bytes.Replace(good, []byte(`"payloadType"`), []byte(`"payload": "e30=", "payloadType"`), 1), one, arm64, Malformed},
		{"key in other case", bytes.Replace(good, []byte(`"payloadType"`), []byte(`"PayloadType"`), 1), one, arm64, Malformed},
		{"null signatures", tamper(func(e *Envelope) { e.Signatures = nil }), one, arm64, Malformed},
		{"empty payload", tamper(func(e *Envelope) { e.Payload = []byte{} }), one, arm64, Malformed},
		{"wrong payload type", tamper(func(e *Envelope) { e.PayloadType = "application/json" }), one, arm64, Malformed},
		{"short signature", tamper(func(e *Envelope) { e.Signatures[0].Sig = e.Signatures[0].Sig[:63] }), one, arm64, Malformed},
		{"key id spelling", tamper(func(e *Envelope) { e.Signatures[0].KeyID = strings.ToUpper(e.Signatures[0].KeyID) }), one, arm64, Malformed},

		{"no signature", tamper(func(e *Envelope) { e.Signatures = []Signature{} }), one, arm64, NotEnoughSignatures},
		{"unknown key", sign(t, m, privX), one, arm64, UnknownKey},
		{"no trusted key", good, Trust{}, arm64, UnknownKey},
		{"bad trusted key", good, Trust{Keys: []ed25519.PublicKey{pubA[:31]}}, arm64, UnknownKey},
		{"tampered payload byte", tamper(func(e *Envelope) { e.Payload[len(e.Payload)/2] ^= 1 }), one, arm64, BadSignature},
		{"tampered chunk digest", tamper(func(e *Envelope) {
			i := bytes.Index(e.Payload, []byte(m.Components[0].Chunks[1]))
			e.Payload[i] ^= 1 // stays a hex digit: 0-9 and a-f flip within the set
		}), one, arm64, BadSignature},
		{"tampered signature", tamper(func(e *Envelope) { e.Signatures[0].Sig[0] ^= 1 }), one, arm64, BadSignature},
		{"swapped signatures", func() []byte {
			env := decodeEnvelope(t, both)
			env.Signatures[0].Sig, env.Signatures[1].Sig = env.Signatures[1].Sig, env.Signatures[0].Sig
			return encodeEnvelope(t, env)
		}(), two, arm64, BadSignature},
		{"one bad among enough good", func() []byte {
			env := decodeEnvelope(t, both)
			env.Signatures[1].Sig[5] ^= 1
			return encodeEnvelope(t, env)
		}(), Trust{Keys: []ed25519.PublicKey{pubA, pubB}}, arm64, BadSignature},
		{"threshold 2, one signer", good, two, arm64, NotEnoughSignatures},
		{"threshold 2, a key trusted twice", both, Trust{Keys: []ed25519.PublicKey{pubA, pubA}, Threshold: 2}, arm64, NotEnoughSignatures},
		{"threshold 2, one signer twice", tamper(func(e *Envelope) { e.Signatures = append(e.Signatures, e.Signatures[0]) }), two, arm64, NotEnoughSignatures},

		{"payload not JSON", signRaw(t, []byte("hello"), privA), one, arm64, Malformed},
		{"unknown manifest field", raw(func(v map[string]any) { v["installScript"] = "rm -rf /" }), one, arm64, Malformed},
		{"unknown component field", raw(func(v map[string]any) { firstComponent(v)["path"] = "/bin/sh" }), one, arm64, Malformed},
		{"manifest key in other case", otherCase, one, arm64, Malformed},
		{"wrong type", raw(func(v map[string]any) { v["version"] = 140 }), one, arm64, Malformed},
		{"too many components", raw(func(v map[string]any) {
			cs := v["components"].([]any)
			for len(cs) <= MaxComponents {
				cs = append(cs, cs[0])
			}
			v["components"] = cs
		}), one, arm64, TooLarge},
		{"invalid content", raw(func(v map[string]any) { v["name"] = "Edge_Agent" }), one, arm64, Invalid},
		{"chunk count off", raw(func(v map[string]any) {
			c := firstComponent(v)
			c["chunks"] = c["chunks"].([]any)[1:]
		}), one, arm64, Invalid},

		{"expired", good, one, VerifyOptions{Now: m.Expires, OS: "linux", Arch: "arm64"}, Expired},
		{"expired long ago", good, one, VerifyOptions{Now: m.Expires.Add(time.Hour)}, Expired},

		{"wrong arch", good, one, VerifyOptions{Now: testNow, OS: "linux", Arch: "amd64"}, WrongPlatform},
		{"wrong os", good, one, VerifyOptions{Now: testNow, OS: "windows", Arch: "arm64"}, WrongPlatform},
		{"wrong arm variant", good, one, VerifyOptions{Now: testNow, OS: "linux", Arch: "arm", Variant: "6"}, WrongPlatform},

		{"upgrade", good, one, committed("1.3.9"), ""},
		{"same version", good, one, committed("1.4.0"), ""},
		{"release after its pre-release", good, one, committed("1.4.0-rc.2"), ""},
		{"downgrade", good, one, committed("1.5.0"), Downgrade},
		{"downgrade to a pre-release", version("1.4.0-rc.1", ""), one, committed("1.4.0"), Downgrade},
		{"downgrade allowed", version("1.4.0", "1.5.0"), one, committed("1.5.0"), ""},
		{"downgrade allowed from below", version("1.4.0", "1.5.0"), one, committed("1.4.5"), ""},
		{"downgrade beyond allowed", version("1.4.0", "1.5.0"), one, committed("1.5.1"), Downgrade},
		{"committed version garbage", good, one, committed("v1.5"), Downgrade},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Verify(tt.envelope, tt.trust, tt.opts)
			if r := ReasonOf(err); r != tt.want {
				t.Fatalf("Verify() reason %q (err %v), want %q", r, err, tt.want)
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Message == "" {
					t.Fatalf("Verify() error %#v is not an *Error with a message", err)
				}
				if got != nil {
					t.Fatalf("Verify() = %v with error %v, want nil", got, err)
				}
				return
			}
			if got == nil || got.Name != m.Name || len(got.Components) != len(m.Components) {
				t.Fatalf("Verify() = %+v, want the signed manifest", got)
			}
		})
	}
}

// TestVerifyOrder checks that signatures are checked before the content:
// a manifest that is invalid, expired and for another platform, signed by
// an unknown key, is refused as UnknownKey, and so on down the order.
func TestVerifyOrder(t *testing.T) {
	pubA, privA := testKey(1)
	_, privX := testKey(9)
	trust := Trust{Keys: []ed25519.PublicKey{pubA}}
	m := testManifest(t)
	v := payloadOf(t, m)
	v["name"] = "BAD"
	invalid := mustJSON(t, v)
	opts := VerifyOptions{Now: m.Expires.Add(time.Hour), OS: "plan9", Arch: "386", HighestCommitted: "9.0.0"}
	steps := []struct {
		envelope []byte
		want     Reason
	}{
		{bytes.Repeat([]byte("x"), MaxEnvelopeBytes+1), TooLarge},
		{[]byte(`{"payloadType": 1}`), Malformed},
		{signRaw(t, invalid, privX), UnknownKey},
		{signRaw(t, invalid, privA), Invalid},
		{sign(t, m, privA), Expired},
	}
	for i, s := range steps {
		if _, err := Verify(s.envelope, trust, opts); ReasonOf(err) != s.want {
			t.Errorf("step %d: Verify() = %v, want reason %s", i, err, s.want)
		}
	}
	opts.Now = testNow
	if _, err := Verify(sign(t, m, privA), trust, opts); ReasonOf(err) != WrongPlatform {
		t.Errorf("Verify() = %v, want WrongPlatform before Downgrade", err)
	}
}

// TestForPlatform checks which components a node takes: its own platform's,
// files for every platform, and the agent naming its variant over a generic
// one.
func TestForPlatform(t *testing.T) {
	data := artifact("x", 100)
	m := &Manifest{Components: []Component{
		component(t, "agent-arm", KindAgent, "linux", "arm", "", data),
		component(t, "agent-armv7", KindAgent, "linux", "arm", "7", data),
		component(t, "config", KindFile, "", "", "", data),
		component(t, "agent-amd64", KindAgent, "linux", "amd64", "", data),
	}}
	names := func(cs []Component) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Name)
		}
		return strings.Join(s, ",")
	}
	tests := []struct{ os, arch, variant, want string }{
		{"linux", "arm", "7", "agent-armv7,config"},
		{"linux", "arm", "6", "agent-arm,config"},
		{"linux", "amd64", "", "config,agent-amd64"},
		{"linux", "riscv64", "", "config"},
	}
	for _, tt := range tests {
		if got := names(m.ForPlatform(tt.os, tt.arch, tt.variant)); got != tt.want {
			t.Errorf("ForPlatform(%s, %s, %s) = %s, want %s", tt.os, tt.arch, tt.variant, got, tt.want)
		}
	}
}
