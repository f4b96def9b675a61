package manifest

import (
	"fmt"
	"time"
)

// Limits on what a node decodes. They bound memory before anything is
// allocated in proportion to the input.
const (
	// MaxEnvelopeBytes is the largest envelope DecodeEnvelope and Verify
	// accept.
	MaxEnvelopeBytes = 1 << 20
	// MaxComponents is the most components a manifest may list.
	MaxComponents = 64
	// MaxChunks is the most chunks one component may have.
	MaxChunks = 1 << 16
	// MaxSignatures is the most signatures an envelope may carry.
	MaxSignatures = 16
	// MinChunkSize and MaxChunkSize bound a component's chunk size.
	MinChunkSize = 4 << 10
	MaxChunkSize = 16 << 20
	// DefaultChunkSize is the chunk size BuildComponent uses when given 0:
	// small enough that a cut link loses little, large enough that a 100 MB
	// agent needs only 400 chunk digests.
	DefaultChunkSize = 256 << 10
)

// Component kinds.
const (
	// KindAgent is the edge agent binary, installed into the A/B slots.
	KindAgent = "agent"
	// KindFile is any other artifact (device firmware, a config bundle),
	// handed verified to the node's install hook.
	KindFile = "file"
)

// Manifest is the signed description of a release. The node installs only
// what a verified manifest lists, byte for byte.
type Manifest struct {
	// Name is the release's name, a DNS label.
	Name string `json:"name"`
	// Version is a semantic version without a leading "v" ("1.4.0",
	// "1.5.0-rc.1"); nodes never go below their highest committed version
	// unless AllowDowngradeFrom says so.
	Version string `json:"version"`
	// Components are the artifacts of the release, 1..MaxComponents with
	// unique names.
	Components []Component `json:"components"`
	// Created is when the release was signed; Expires is when nodes stop
	// accepting it, which bounds how long a withdrawn release can be
	// replayed.
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// AllowDowngradeFrom, if set, is a version >= Version: a node whose
	// highest committed version is <= AllowDowngradeFrom may install this
	// lower version. It is signed like everything else, so only the holders
	// of the release keys can authorise a downgrade.
	AllowDowngradeFrom string `json:"allowDowngradeFrom,omitempty"`
	// HealthChecks are checks of the node's pods that must pass, besides
	// the node's own health, for a node to commit the release in its
	// trial: at most MaxHealthChecks with unique names. They are signed
	// like everything else, so the hub can neither add nor drop one.
	HealthChecks []HealthCheck `json:"healthChecks,omitempty"`
}

// Component is one artifact of a release and the digests that pin it.
type Component struct {
	// Name identifies the component in the release, a DNS label.
	Name string `json:"name"`
	// Kind is KindAgent or KindFile.
	Kind string `json:"kind"`
	// OS and Arch are GOOS and GOARCH names of the platform the artifact
	// is for. An agent must name both; a file component may leave both
	// empty to mean every platform.
	OS   string `json:"os,omitempty"`
	Arch string `json:"arch,omitempty"`
	// Variant is GOARM ("5", "6" or "7") for Arch "arm" and empty
	// otherwise; empty on arm means any variant.
	Variant string `json:"variant,omitempty"`
	// Size is the artifact's length in bytes, at least 1.
	Size int64 `json:"size"`
	// SHA256 is the lowercase hex sha256 of the whole artifact.
	SHA256 string `json:"sha256"`
	// ChunkSize is the length of every chunk but the last, which is
	// shorter when ChunkSize does not divide Size.
	ChunkSize int64 `json:"chunkSize"`
	// Chunks are the lowercase hex sha256 digests of the chunks in order.
	Chunks []string `json:"chunks"`
}

// knownOS and knownArch are the GOOS and GOARCH values of `go tool dist
// list`; anything else in a manifest is a typo or an attack on a path.
var (
	knownOS = set("aix", "android", "darwin", "dragonfly", "freebsd", "illumos", "ios", "js",
		"linux", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows")
	knownArch = set("386", "amd64", "arm", "arm64", "loong64", "mips", "mips64", "mips64le",
		"mipsle", "ppc64", "ppc64le", "riscv64", "s390x", "wasm")
	armVariants = set("5", "6", "7")
)

// set returns a set of the given strings.
func set(s ...string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

// Validate checks every rule of a manifest's content and returns an *Error
// of Reason Invalid naming the first broken one.
func (m *Manifest) Validate() error {
	if err := validate(m); err != nil {
		return &Error{Reason: Invalid, Message: err.Error()}
	}
	return nil
}

// validate is Validate with plain errors.
func validate(m *Manifest) error {
	if !isDNSLabel(m.Name) {
		return fmt.Errorf("name %q is not a DNS label", m.Name)
	}
	v, err := parseVersion(m.Version)
	if err != nil {
		return err
	}
	if m.AllowDowngradeFrom != "" {
		from, err := parseVersion(m.AllowDowngradeFrom)
		if err != nil {
			return fmt.Errorf("allowDowngradeFrom: %w", err)
		}
		if from.compare(v) < 0 {
			return fmt.Errorf("allowDowngradeFrom %s is lower than version %s", m.AllowDowngradeFrom, m.Version)
		}
	}
	if m.Created.IsZero() || m.Expires.IsZero() {
		return fmt.Errorf("created and expires are required")
	}
	if !m.Expires.After(m.Created) {
		return fmt.Errorf("expires %s is not after created %s", m.Expires.Format(time.RFC3339), m.Created.Format(time.RFC3339))
	}
	if err := validateComponents(m.Components); err != nil {
		return err
	}
	return validateHealthChecks(m.HealthChecks)
}

// validateComponents checks the component list: its length, each
// component, unique names and at most one agent per platform.
func validateComponents(cs []Component) error {
	if len(cs) == 0 || len(cs) > MaxComponents {
		return fmt.Errorf("%d components, want 1..%d", len(cs), MaxComponents)
	}
	names := make(map[string]bool, len(cs))
	agents := make(map[string]bool)
	for i := range cs {
		c := &cs[i]
		if err := c.validate(); err != nil {
			return fmt.Errorf("component %d (%q): %w", i, c.Name, err)
		}
		if names[c.Name] {
			return fmt.Errorf("component name %q is used twice", c.Name)
		}
		names[c.Name] = true
		if c.Kind == KindAgent {
			p := c.platform()
			if agents[p] {
				return fmt.Errorf("two agent components for %s", p)
			}
			agents[p] = true
		}
	}
	return nil
}

// platform returns "os/arch[/variant]" of c.
func (c *Component) platform() string {
	p := c.OS + "/" + c.Arch
	if c.Variant != "" {
		p += "/v" + c.Variant
	}
	return p
}

// validate checks one component's fields.
func (c *Component) validate() error {
	if !isDNSLabel(c.Name) {
		return fmt.Errorf("name is not a DNS label")
	}
	if err := c.validatePlatform(); err != nil {
		return err
	}
	if c.Size < 1 {
		return fmt.Errorf("size %d, want at least 1", c.Size)
	}
	if !isHexDigest(c.SHA256) {
		return fmt.Errorf("sha256 %q is not 64 lowercase hex digits", c.SHA256)
	}
	if c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize {
		return fmt.Errorf("chunk size %d, want %d..%d", c.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	want := (c.Size-1)/c.ChunkSize + 1
	if want > MaxChunks {
		return fmt.Errorf("size %d in chunks of %d makes %d chunks, over %d", c.Size, c.ChunkSize, want, MaxChunks)
	}
	if int64(len(c.Chunks)) != want {
		return fmt.Errorf("%d chunk digests, want %d for size %d in chunks of %d", len(c.Chunks), want, c.Size, c.ChunkSize)
	}
	for i, d := range c.Chunks {
		if !isHexDigest(d) {
			return fmt.Errorf("chunk %d digest %q is not 64 lowercase hex digits", i, d)
		}
	}
	return nil
}

// validatePlatform checks Kind, OS, Arch and Variant together.
func (c *Component) validatePlatform() error {
	switch c.Kind {
	case KindAgent:
		if c.OS == "" || c.Arch == "" {
			return fmt.Errorf("an agent component needs os and arch")
		}
	case KindFile:
		if (c.OS == "") != (c.Arch == "") {
			return fmt.Errorf("os and arch are both set or both empty")
		}
	default:
		return fmt.Errorf("kind %q, want %q or %q", c.Kind, KindAgent, KindFile)
	}
	if c.OS != "" && !knownOS[c.OS] {
		return fmt.Errorf("unknown os %q", c.OS)
	}
	if c.Arch != "" && !knownArch[c.Arch] {
		return fmt.Errorf("unknown arch %q", c.Arch)
	}
	if c.Variant != "" && (c.Arch != "arm" || !armVariants[c.Variant]) {
		return fmt.Errorf("variant %q for arch %q, want 5, 6 or 7 and only for arm", c.Variant, c.Arch)
	}
	return nil
}

// For reports whether c is for a node of the given platform: the same OS and
// Arch (or a file for every platform), and the same Variant unless c leaves
// it empty.
func (c *Component) For(os, arch, variant string) bool {
	if c.OS == "" && c.Arch == "" {
		return c.Kind == KindFile
	}
	return c.OS == os && c.Arch == arch && (c.Variant == "" || c.Variant == variant)
}

// ForPlatform returns the components for the given node platform, in
// manifest order, with at most one agent: one that names the node's variant
// wins over one that names none. The caller owns the returned slice; its
// elements share Chunks with m.
func (m *Manifest) ForPlatform(os, arch, variant string) []Component {
	var out []Component
	agent := -1
	for _, c := range m.Components {
		if !c.For(os, arch, variant) {
			continue
		}
		if c.Kind == KindAgent {
			if agent >= 0 {
				if out[agent].Variant == "" {
					out[agent] = c
				}
				continue
			}
			agent = len(out)
		}
		out = append(out, c)
	}
	return out
}

// isDNSLabel reports whether s is an RFC 1123 label: 1..63 of [a-z0-9-],
// starting and ending with a letter or digit.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isHexDigest reports whether s is a sha256 digest in lowercase hex, the
// one spelling this package writes, so a digest has one form only.
func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
