package firmwarerelease

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// Reasons of the conditions this controller sets, besides the
// manifest.Reason of a failed verification.
const (
	// ReasonVerified: Verified is True.
	ReasonVerified = "Verified"
	// ReasonNoTrust: the hub trusts no key (no trust ConfigMap, or one
	// without keys).
	ReasonNoTrust = "NoTrustedKeys"
	// ReasonTrustInvalid: the trust ConfigMap does not decode.
	ReasonTrustInvalid = "TrustSetInvalid"
	// ReasonSpecMismatch: the envelope verifies but spec.version or
	// spec.components do not say what the signed manifest says.
	ReasonSpecMismatch = "SpecMismatch"
	// ReasonStored: every artifact is in the store.
	ReasonStored = "Stored"
	// ReasonMissing: some artifact is not in the store, or not whole.
	ReasonMissing = "ArtifactsMissing"
	// ReasonUnreadable: the manifest does not decode, so its artifacts
	// are unknown.
	ReasonUnreadable = "ManifestUnreadable"
)

// Stater tells the size of a stored artifact, as *artifacts.Store does.
type Stater interface {
	Stat(sha256hex string) (size int64, ok bool)
}

// Input is what the status of a Release is decided from.
type Input struct {
	// Trust is the hub's trust set; TrustErr, when not nil, is why the
	// trust ConfigMap could not be read, and Trust is then unused.
	Trust    manifest.Trust
	TrustErr error
	// Store holds the artifacts; non-nil.
	Store Stater
	// Now is the hub's clock.
	Now time.Time
}

// Decide returns the status rel should have and when it must be decided
// again at the latest (the manifest's expiry while it verifies; zero for
// never). It does no I/O but in.Store's Stat, and keeps the transition
// times of conditions whose status did not change.
func Decide(rel *firmwarev1.Release, in Input) (firmwarev1.ReleaseStatus, time.Time) {
	st := firmwarev1.ReleaseStatus{
		ObservedGeneration: rel.Generation,
		Conditions:         slices.Clone(rel.Status.Conditions),
	}
	var recheck time.Time
	verified := metav1.Condition{Type: firmwarev1.ReleaseVerified, ObservedGeneration: rel.Generation}
	switch {
	case in.TrustErr != nil:
		verified.Status, verified.Reason = metav1.ConditionUnknown, ReasonTrustInvalid
		verified.Message = "the hub's trust set is unreadable: " + in.TrustErr.Error()
	case len(in.Trust.Keys) == 0:
		verified.Status, verified.Reason = metav1.ConditionFalse, ReasonNoTrust
		verified.Message = "the hub trusts no release key: add one with `outpost release trust add KEY.pub`"
	default:
		m, err := manifest.Verify(rel.Spec.Envelope, in.Trust, manifest.VerifyOptions{Now: in.Now})
		switch {
		case err != nil:
			verified.Status, verified.Reason = metav1.ConditionFalse, string(manifest.Invalid)
			if r := manifest.ReasonOf(err); r != "" {
				verified.Reason = string(r)
			}
			verified.Message = err.Error()
		case specMismatch(rel, m) != "":
			verified.Status, verified.Reason = metav1.ConditionFalse, ReasonSpecMismatch
			verified.Message = "the envelope verifies, but " + specMismatch(rel, m)
		default:
			st.KeyIDs = signers(rel.Spec.Envelope, in.Trust)
			verified.Status, verified.Reason = metav1.ConditionTrue, ReasonVerified
			verified.Message = fmt.Sprintf("release %s %s signed by %s, expires %s", m.Name, m.Version,
				strings.Join(st.KeyIDs, ", "), m.Expires.UTC().Format(time.RFC3339))
			recheck = m.Expires
		}
	}
	meta.SetStatusCondition(&st.Conditions, withTime(verified, in.Now))
	meta.SetStatusCondition(&st.Conditions, withTime(stored(rel, in.Store), in.Now))
	slices.SortFunc(st.Conditions, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	return st, recheck
}

func withTime(c metav1.Condition, now time.Time) metav1.Condition {
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	if len(c.Message) > 1024 {
		c.Message = c.Message[:1024]
	}
	return c
}

// stored returns the ArtifactsStored condition of rel: the artifacts of
// its manifest (decoded without verification: what is stored does not
// depend on who signed it) checked against the store by digest and size.
func stored(rel *firmwarev1.Release, s Stater) metav1.Condition {
	c := metav1.Condition{Type: firmwarev1.ReleaseArtifactsStored, ObservedGeneration: rel.Generation}
	m, err := unverifiedManifest(rel.Spec.Envelope)
	if err != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonUnreadable, err.Error()
		return c
	}
	var missing []string
	for _, comp := range m.Components {
		if size, ok := s.Stat(comp.SHA256); !ok || size != comp.Size {
			missing = append(missing, comp.Name+" ("+comp.SHA256[:min(12, len(comp.SHA256))]+")")
		}
	}
	if len(missing) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonMissing
		c.Message = "not in the hub's artifact store: " + strings.Join(missing, ", ")
		return c
	}
	c.Status, c.Reason = metav1.ConditionTrue, ReasonStored
	c.Message = fmt.Sprintf("all %d artifacts are in the hub's artifact store", len(m.Components))
	return c
}

// unverifiedManifest decodes the manifest of envelope without checking
// its signatures.
func unverifiedManifest(envelope []byte) (*manifest.Manifest, error) {
	if len(envelope) > manifest.MaxEnvelopeBytes {
		return nil, fmt.Errorf("envelope is %d bytes, over %d", len(envelope), manifest.MaxEnvelopeBytes)
	}
	env, err := manifest.DecodeEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	return manifest.DecodeManifest(env.Payload)
}

// signers returns the ids of the trusted keys that signed envelope, which
// has verified: a signature by a trusted key that did not verify would
// have failed it.
func signers(envelope []byte, trust manifest.Trust) []string {
	env, err := manifest.DecodeEnvelope(envelope)
	if err != nil {
		return nil
	}
	trusted := map[string]bool{}
	for _, k := range trust.Keys {
		trusted[manifest.KeyID(k)] = true
	}
	var ids []string
	for _, s := range env.Signatures {
		if trusted[s.KeyID] {
			ids = append(ids, s.KeyID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// specMismatch says how rel's spec differs from its signed manifest m,
// or "" when it summarises it faithfully.
func specMismatch(rel *firmwarev1.Release, m *manifest.Manifest) string {
	if rel.Spec.Version != m.Version {
		return fmt.Sprintf("spec.version %q is not the signed version %q", rel.Spec.Version, m.Version)
	}
	want := SpecComponents(m)
	if !slices.Equal(rel.Spec.Components, want) && len(rel.Spec.Components) > 0 {
		return "spec.components do not summarise the signed manifest's components"
	}
	return ""
}

// SpecComponents returns the summary of m's components a Release's spec
// holds, in the manifest's order.
func SpecComponents(m *manifest.Manifest) []firmwarev1.ReleaseComponent {
	out := make([]firmwarev1.ReleaseComponent, 0, len(m.Components))
	for _, c := range m.Components {
		out = append(out, firmwarev1.ReleaseComponent{
			Name: c.Name, Kind: c.Kind, OS: c.OS, Arch: c.Arch, Variant: c.Variant, Size: c.Size, SHA256: c.SHA256,
		})
	}
	return out
}
