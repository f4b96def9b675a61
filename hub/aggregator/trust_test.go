package aggregator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"maps"
	"math/big"
	"strings"
	"testing"
	"time"
)

// testCA returns the PEM of a self-signed CA named cn valid until notAfter.
func testCA(t testing.TB, cn string, notAfter time.Time) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestTrustData(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cluster, front := testCA(t, "cluster", now.Add(time.Hour)), testCA(t, "front", now.Add(time.Hour))
	other, expired := testCA(t, "other", now.Add(time.Hour)), testCA(t, "expired", now.Add(-time.Hour))
	hub := HubTrust([]byte(cluster), []byte(front), "front-proxy-client")
	fresh := map[string]string{
		KeyClientCA:          cluster,
		KeyRequestHeaderCA:   front,
		KeyAllowedNames:      `["front-proxy-client"]`,
		KeyUsernameHeaders:   `["X-Remote-User"]`,
		KeyUIDHeaders:        `["X-Remote-Uid"]`,
		KeyGroupHeaders:      `["X-Remote-Group"]`,
		KeyExtraHeaderPrefix: `["X-Remote-Extra-"]`,
	}
	tests := []struct {
		name    string
		have    map[string]string
		want    Trust
		out     map[string]string
		wantErr bool
	}{
		{name: "created", have: nil, want: hub, out: fresh},
		{name: "kept", have: fresh, want: hub, out: fresh},
		{name: "no front proxy", have: nil, want: Trust{ClientCA: []byte(cluster)}, out: map[string]string{KeyClientCA: cluster}},
		{
			name: "another server's kept, expired dropped",
			have: map[string]string{KeyClientCA: other + expired, KeyAllowedNames: `["aggregator"]`, KeyRequestHeaderCA: front},
			want: hub,
			out: func() map[string]string {
				m := maps.Clone(fresh)
				m[KeyClientCA] = other + cluster
				m[KeyAllowedNames] = `["aggregator","front-proxy-client"]`
				return m
			}(),
		},
		{name: "unreadable list", have: map[string]string{KeyAllowedNames: "[x"}, want: hub, wantErr: true},
		{name: "unreadable CA", have: map[string]string{KeyClientCA: "garbage"}, want: hub, wantErr: true},
		{name: "too large", have: map[string]string{KeyClientCA: strings.Repeat("a", maxTrustValue+1)}, want: hub, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TrustData(tt.have, tt.want, now)
			if (err != nil) != tt.wantErr {
				t.Fatalf("TrustData() error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !maps.Equal(got, tt.out) {
				t.Errorf("TrustData() = %v, want %v", got, tt.out)
			}
		})
	}
}

// FuzzTrustData: whatever a trust ConfigMap holds, TrustData returns an
// error or data that holds the hub's trust and reads back unchanged.
func FuzzTrustData(f *testing.F) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cluster := testCA(f, "cluster", now.Add(time.Hour))
	hub := HubTrust([]byte(cluster), []byte(cluster), "front-proxy-client")
	f.Add(cluster, `["a","b"]`, `["X-Remote-User"]`)
	f.Add("", "", "")
	f.Add("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", `[1]`, `null`)
	f.Add(cluster+"trailing", `["front-proxy-client"]`, `[""]`)
	f.Fuzz(func(t *testing.T, ca, names, users string) {
		have := map[string]string{KeyClientCA: ca, KeyRequestHeaderCA: ca, KeyAllowedNames: names, KeyUsernameHeaders: users}
		got, err := TrustData(have, hub, now)
		if err != nil {
			return
		}
		if !strings.Contains(got[KeyClientCA], cluster) || !strings.Contains(got[KeyAllowedNames], `"front-proxy-client"`) {
			t.Fatalf("TrustData(%v) = %v, lacks the hub's trust", have, got)
		}
		again, err := TrustData(got, hub, now)
		if err != nil || !maps.Equal(again, got) {
			t.Fatalf("TrustData of its own output = %v, %v; want it unchanged", again, err)
		}
	})
}
