package manifest

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzVerify feeds arbitrary envelopes to Verify: it must never panic, and
// must never accept a payload the trusted key did not sign.
func FuzzVerify(f *testing.F) {
	pub, priv := testKey(1)
	_, other := testKey(2)
	m := testManifest(f)
	good := sign(f, m, priv)
	signed := decodeEnvelope(f, good).Payload
	f.Add(good)
	f.Add(sign(f, m, priv, other))
	f.Add(sign(f, m, other))
	withChecks := testManifest(f)
	withChecks.HealthChecks = testChecks()
	checked := sign(f, withChecks, priv)
	signedChecks := decodeEnvelope(f, checked).Payload
	f.Add(checked)
	f.Add(signRaw(f, []byte(`{"name":"a"}`), priv))
	f.Add(signRaw(f, []byte(`[`), priv))
	f.Add([]byte(`{"payloadType":"application/vnd.outpost.firmware.manifest.v1+json","payload":"e30=","signatures":[]}`))
	f.Add([]byte(`{"payloadType":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(``))
	f.Add([]byte(`[[[[[[[[[[`))
	trust := Trust{Keys: []ed25519.PublicKey{pub}}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Verify(data, trust, VerifyOptions{Now: testNow})
		if err != nil {
			if ReasonOf(err) == "" || got != nil {
				t.Fatalf("Verify() = %v, %v: want nil and an *Error", got, err)
			}
			return
		}
		env, derr := DecodeEnvelope(data)
		if derr != nil {
			t.Fatalf("Verify accepted an envelope DecodeEnvelope refuses: %v", derr)
		}
		if !bytes.Equal(env.Payload, signed) && !bytes.Equal(env.Payload, signedChecks) {
			t.Fatalf("Verify accepted a payload the key never signed: %q", env.Payload)
		}
	})
}

// FuzzDecodeManifest feeds arbitrary payloads to DecodeManifest: it must
// never panic, and what it accepts must be valid and survive a round trip
// through the encoder unchanged, so a signer and a node agree on it.
func FuzzDecodeManifest(f *testing.F) {
	m := testManifest(f)
	good := mustJSON(f, m)
	f.Add(good)
	f.Add(bytes.Replace(good, []byte(`"version"`), []byte(`"Version"`), 1))
	f.Add([]byte(`{"name":"a","version":"1.0.0","components":[{"chunks":[]}]}`))
	f.Add([]byte(`{"components":null}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"name":"\u0061"}`))
	checked := testManifest(f)
	checked.HealthChecks = testChecks()
	f.Add(mustJSON(f, checked))
	f.Add([]byte(`{"healthChecks":[{"name":"a","exec":["x"],"http":{"port":1,"path":"/"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeManifest(data)
		if err != nil {
			if ReasonOf(err) == "" || got != nil {
				t.Fatalf("DecodeManifest() = %v, %v: want nil and an *Error", got, err)
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("DecodeManifest accepted an invalid manifest: %v", err)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeManifest(again)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normal(got), normal(back)) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", got, back)
		}
	})
}

// normal returns m with its times in UTC, for comparing decoded manifests
// whose time zones were spelled differently.
func normal(m *Manifest) Manifest {
	c := *m
	c.Created, c.Expires = c.Created.UTC(), c.Expires.UTC()
	return c
}
