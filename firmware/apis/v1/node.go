package v1

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The annotations through which the hub's rollout controller and a node's
// agent talk about the node's updates, on the node's Node object.
//
//   - AnnotationOffer is written by the rollout controller: the release the
//     node should install (an Offer, JSON), or should revert from. The agent
//     sees it in its sync view; it is only a hint where to look, since the
//     node verifies the release's signed manifest itself.
//   - AnnotationState is written by the node, through its status reports
//     (it is one of sync/wire's NodeAnnotations): its update state, a
//     NodeFirmware, JSON.
//   - AnnotationFailedVersions is written by the rollout controller: the
//     release versions that failed on the node, comma-separated, so that the
//     hub never offers one of them to the node again, whatever the node
//     itself remembers.
const (
	AnnotationOffer          = "firmware.outpost.dev/offer"
	AnnotationState          = "firmware.outpost.dev/state" // sync/wire's AnnotationFirmware
	AnnotationFailedVersions = "firmware.outpost.dev/failed-versions"
)

// MaxAnnotationBytes bounds the value of AnnotationOffer and
// AnnotationState that DecodeOffer and DecodeNodeFirmware accept.
const MaxAnnotationBytes = 16 << 10

// OfferAction says what an Offer asks of a node.
type OfferAction string

const (
	// OfferInstall asks the node to install Offer.Release.
	OfferInstall OfferAction = "Install"
	// OfferRevert asks a node that installed Offer.Release, trial or
	// committed, to go back to the version it ran before (a rollout
	// whose failure budget tripped with the Revert action).
	OfferRevert OfferAction = "Revert"
)

// Offer is the value of AnnotationOffer.
type Offer struct {
	// Rollout and Release name the objects the offer comes from.
	Rollout string `json:"rollout"`
	Release string `json:"release"`
	// Version is the release's version, as its spec says (the node takes
	// the version from the manifest it verifies, and ignores an offer
	// whose manifest says otherwise).
	Version string      `json:"version"`
	Action  OfferAction `json:"action"`
	// HealthWindow is how long the new version has to prove healthy on the
	// node before the node commits it.
	HealthWindow metav1.Duration `json:"healthWindow"`
}

// FirmwareState is a node's update state for the version it works on; the
// same values as firmware/rollout's NodeState.
type FirmwareState string

const (
	StateIdle        FirmwareState = "Idle"
	StateOffered     FirmwareState = "Offered"
	StateDownloading FirmwareState = "Downloading"
	StateInstalling  FirmwareState = "Installing"
	StateTrial       FirmwareState = "Trial"
	StateUpdated     FirmwareState = "Updated"
	StateFailed      FirmwareState = "Failed"
	StateReverted    FirmwareState = "Reverted"
)

// NodeFirmware is the value of AnnotationState.
type NodeFirmware struct {
	// Version is the release version the node has committed ("" before its
	// first release: it runs what it was installed with).
	Version string `json:"version,omitempty"`
	// Release and Target are the release and version the node works on or
	// last worked on, State its progress with it, Reason (a
	// firmware/manifest Reason or one of the updater's, CamelCase) and
	// Message why it failed, Since when State last changed.
	Release string        `json:"release,omitempty"`
	Target  string        `json:"target,omitempty"`
	State   FirmwareState `json:"state,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	Message string        `json:"message,omitempty"`
	Since   metav1.Time   `json:"since,omitempty"`
	// FailedVersions are the versions that failed on the node, as the node
	// remembers them (at most 32, the latest).
	FailedVersions []string `json:"failedVersions,omitempty"`
	// Transfer counts the bytes of the last download: those received, those
	// of the full artifacts, and how many times it resumed after a cut.
	Transfer *TransferStats `json:"transfer,omitempty"`
}

// TransferStats counts the bytes of one download.
type TransferStats struct {
	Received int64 `json:"received"`
	Full     int64 `json:"full"`
	Resumes  int32 `json:"resumes,omitempty"`
	Delta    bool  `json:"delta,omitempty"`
	// FromPeers is how many of the Received bytes came from the node's
	// site peers rather than over its own uplink from the hub.
	FromPeers int64 `json:"fromPeers,omitempty"`
}

// DecodeOffer decodes an AnnotationOffer value.
func DecodeOffer(s string) (*Offer, error) {
	var o Offer
	if err := decodeAnnotation(s, &o); err != nil {
		return nil, fmt.Errorf("offer: %w", err)
	}
	switch o.Action {
	case OfferInstall, OfferRevert:
	default:
		return nil, fmt.Errorf("offer: unknown action %q", o.Action)
	}
	if o.Release == "" || o.Version == "" {
		return nil, fmt.Errorf("offer: no release or version")
	}
	return &o, nil
}

// DecodeNodeFirmware decodes an AnnotationState value.
func DecodeNodeFirmware(s string) (*NodeFirmware, error) {
	var n NodeFirmware
	if err := decodeAnnotation(s, &n); err != nil {
		return nil, fmt.Errorf("node firmware state: %w", err)
	}
	return &n, nil
}

func decodeAnnotation(s string, v any) error {
	if len(s) > MaxAnnotationBytes {
		return fmt.Errorf("%d bytes, over the limit of %d", len(s), MaxAnnotationBytes)
	}
	return json.Unmarshal([]byte(s), v)
}

// Encode returns o as an AnnotationOffer value.
func (o *Offer) Encode() string { return mustJSON(o) }

// Encode returns n as an AnnotationState value.
func (n *NodeFirmware) Encode() string { return mustJSON(n) }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings and numbers
	}
	return string(b)
}
