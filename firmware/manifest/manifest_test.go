package manifest

import (
	"cmp"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidate checks each rule of a manifest's content.
func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Manifest)
		want   string // a substring of the error; "" for valid
	}{
		{"valid", func(*Manifest) {}, ""},
		{"pre-release version", func(m *Manifest) { m.Version = "2.0.0-rc.1" }, ""},
		{"name with dash", func(m *Manifest) { m.Name = "a-1" }, ""},
		{"empty name", func(m *Manifest) { m.Name = "" }, "DNS label"},
		{"upper-case name", func(m *Manifest) { m.Name = "Agent" }, "DNS label"},
		{"name ends in dash", func(m *Manifest) { m.Name = "agent-" }, "DNS label"},
		{"long name", func(m *Manifest) { m.Name = strings.Repeat("a", 64) }, "DNS label"},
		{"version with v", func(m *Manifest) { m.Version = "v1.4.0" }, "version"},
		{"two-part version", func(m *Manifest) { m.Version = "1.4" }, "version"},
		{"build metadata", func(m *Manifest) { m.Version = "1.4.0+abc" }, "version"},
		{"leading zero", func(m *Manifest) { m.Version = "1.04.0" }, "leading zeros"},
		{"empty pre-release", func(m *Manifest) { m.Version = "1.4.0-" }, "pre-release"},
		{"downgrade from below version", func(m *Manifest) { m.AllowDowngradeFrom = "1.3.0" }, "lower than version"},
		{"downgrade from garbage", func(m *Manifest) { m.AllowDowngradeFrom = "latest" }, "allowDowngradeFrom"},
		{"downgrade from same", func(m *Manifest) { m.AllowDowngradeFrom = "1.4.0" }, ""},
		{"no expiry", func(m *Manifest) { m.Expires = time.Time{} }, "required"},
		{"expires before created", func(m *Manifest) { m.Expires = m.Created }, "not after"},
		{"no components", func(m *Manifest) { m.Components = nil }, "0 components"},
		{"too many components", func(m *Manifest) {
			for i := len(m.Components); i <= MaxComponents; i++ {
				c := m.Components[2]
				c.Name = "f" + strings.Repeat("x", i)[:min(i, 60)] + string(rune('a'+i%26))
				m.Components = append(m.Components, c)
			}
		}, "components"},
		{"duplicate name", func(m *Manifest) { m.Components[2].Name = m.Components[0].Name }, "used twice"},
		{"two agents one platform", func(m *Manifest) { m.Components[2].Kind = KindAgent }, "two agent"},
		{"bad component name", func(m *Manifest) { m.Components[0].Name = "../agent" }, "DNS label"},
		{"unknown kind", func(m *Manifest) { m.Components[0].Kind = "script" }, "kind"},
		{"agent without os", func(m *Manifest) { m.Components[0].OS = "" }, "needs os and arch"},
		{"file for every platform", func(m *Manifest) { m.Components[2].OS, m.Components[2].Arch = "", "" }, ""},
		{"file with os only", func(m *Manifest) { m.Components[2].Arch = "" }, "both set or both empty"},
		{"unknown os", func(m *Manifest) { m.Components[0].OS = "Linux" }, "unknown os"},
		{"unknown arch", func(m *Manifest) { m.Components[0].Arch = "aarch64" }, "unknown arch"},
		{"variant off arm", func(m *Manifest) { m.Components[0].Variant = "7" }, "variant"},
		{"bad arm variant", func(m *Manifest) { m.Components[1].Variant = "8" }, "variant"},
		{"zero size", func(m *Manifest) { m.Components[2].Size = 0 }, "size"},
		{"negative size", func(m *Manifest) { m.Components[2].Size = -1 }, "size"},
		{"upper-case digest", func(m *Manifest) { m.Components[0].SHA256 = strings.ToUpper(m.Components[0].SHA256) }, "sha256"},
		{"short digest", func(m *Manifest) { m.Components[0].SHA256 = m.Components[0].SHA256[:62] }, "sha256"},
		{"chunk size too small", func(m *Manifest) { m.Components[0].ChunkSize = MinChunkSize - 1 }, "chunk size"},
		{"chunk size too large", func(m *Manifest) { m.Components[0].ChunkSize = MaxChunkSize + 1 }, "chunk size"},
		{"too many chunks", func(m *Manifest) { m.Components[0].Size = (MaxChunks + 1) * MinChunkSize }, "over"},
		{"a chunk missing", func(m *Manifest) { m.Components[0].Chunks = m.Components[0].Chunks[1:] }, "chunk digests"},
		{"a chunk too many", func(m *Manifest) { m.Components[2].Chunks = append(m.Components[2].Chunks, m.Components[2].SHA256) }, "chunk digests"},
		{"bad chunk digest", func(m *Manifest) { m.Components[0].Chunks[1] = "zz" }, "chunk 1 digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testManifest(t)
			tt.change(m)
			err := m.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if ReasonOf(err) != Invalid || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want Invalid containing %q", err, tt.want)
			}
		})
	}
}

// TestCompareVersions checks semver precedence, including the pre-release
// rules of semver 2.0.0 section 11.
func TestCompareVersions(t *testing.T) {
	ordered := []string{
		"0.0.1", "0.9.0", "1.0.0-0", "1.0.0-2", "1.0.0-10", "1.0.0-alpha", "1.0.0-alpha.1",
		"1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1",
		"1.0.0", "1.2.0", "1.10.0", "2.0.0", "10.0.0", "99999999999999999999.0.0",
	}
	for i, a := range ordered {
		for j, b := range ordered {
			got, err := CompareVersions(a, b)
			if err != nil {
				t.Fatalf("CompareVersions(%s, %s): %v", a, b, err)
			}
			if want := cmp.Compare(i, j); got != want {
				t.Errorf("CompareVersions(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
	for _, bad := range []string{"", "1", "1.2", "1.2.3.4", "v1.2.3", "01.2.3", "1.2.3-01", "1.2.3-a..b", "1.2.3+meta", "1.2.x", strings.Repeat("1", 70) + ".0.0"} {
		if _, err := CompareVersions(bad, "1.0.0"); err == nil {
			t.Errorf("CompareVersions(%q, 1.0.0) = nil error, want an error", bad)
		}
		if _, err := CompareVersions("1.0.0", bad); err == nil {
			t.Errorf("CompareVersions(1.0.0, %q) = nil error, want an error", bad)
		}
	}
}

// TestDecodeManifest checks the strict decoder on payloads a signer could
// be led to sign.
func TestDecodeManifest(t *testing.T) {
	m := testManifest(t)
	good := mustJSON(t, m)
	if got, err := DecodeManifest(good); err != nil || got.Version != m.Version {
		t.Fatalf("DecodeManifest(good) = %v, %v", got, err)
	}
	tests := []struct {
		name string
		data string
		want Reason
	}{
		{"empty", "", Malformed},
		{"null", "null", Malformed},
		{"list", "[]", Malformed},
		{"unknown field", strings.Replace(string(good), `"name"`, `"nam": "x", "name"`, 1), Malformed},
		{"duplicate field", strings.Replace(string(good), `"version":"1.4.0"`, `"version":"1.4.0","version":"0.1.0"`, 1), Malformed},
		{"case folded key", strings.Replace(string(good), `"version"`, `"VERSION"`, 1), Malformed},
		{"null components", strings.Replace(string(good), `"components":[`, `"components":null,"x":[`, 1), Malformed},
		{"object for a string", strings.Replace(string(good), `"1.4.0"`, `{}`, 1), Malformed},
		{"trailing", string(good) + " 1", Malformed},
		{"bad time", strings.Replace(string(good), `"created":"`, `"created":"x`, 1), Malformed},
		{"too large", `"` + strings.Repeat("a", MaxEnvelopeBytes) + `"`, TooLarge},
		{"too many chunks", `{"components":[{"chunks":[` + strings.Repeat(`"",`, MaxChunks) + `""]}]}`, TooLarge},
		{"invalid", strings.Replace(string(good), `"1.4.0"`, `"1.4"`, 1), Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeManifest([]byte(tt.data))
			if ReasonOf(err) != tt.want || got != nil {
				t.Fatalf("DecodeManifest() = %v, %v, want reason %s", got, err, tt.want)
			}
		})
	}
}

// TestErrorIs checks that refusals match by Reason with errors.Is.
func TestErrorIs(t *testing.T) {
	err := error(refuse(Expired, "at %s", "noon"))
	if !errors.Is(err, &Error{Reason: Expired}) || errors.Is(err, &Error{Reason: Downgrade}) {
		t.Errorf("errors.Is(%v) by Reason does not work", err)
	}
	if got := ReasonOf(errors.New("x")); got != "" {
		t.Errorf("ReasonOf(plain error) = %q, want empty", got)
	}
	if got := err.Error(); got != "firmware manifest: Expired: at noon" {
		t.Errorf("Error() = %q", got)
	}
}
