package v1

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestOfferRoundTrip(t *testing.T) {
	o := Offer{Rollout: "r", Release: "rel", Version: "1.2.0", Action: OfferInstall, HealthWindow: metav1.Duration{Duration: 5 * time.Minute}}
	got, err := DecodeOffer(o.Encode())
	if err != nil || *got != o {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{
		``, `{`, `{"release":"r","version":"1","action":"Explode"}`,
		`{"release":"","version":"1","action":"Install"}`,
		`{"release":"r","version":"1","action":"Install","x":"` + strings.Repeat("a", MaxAnnotationBytes) + `"}`,
	} {
		if _, err := DecodeOffer(bad); err == nil {
			t.Errorf("DecodeOffer(%.40q) = nil error", bad)
		}
	}
}

func TestNodeFirmwareRoundTrip(t *testing.T) {
	n := NodeFirmware{Version: "1.0.0", Target: "1.1.0", State: StateTrial, FailedVersions: []string{"0.9.0"},
		Transfer: &TransferStats{Received: 10, Full: 100, Delta: true, FromPeers: 6}}
	got, err := DecodeNodeFirmware(n.Encode())
	if err != nil || got.Encode() != n.Encode() {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
}

func FuzzDecodeAnnotations(f *testing.F) {
	f.Add(`{"rollout":"r","release":"rel","version":"1.2.0","action":"Install","healthWindow":"5m0s"}`)
	f.Add(`{"version":"1.0.0","state":"Trial","failedVersions":["a"],"transfer":{"received":1,"full":2}}`)
	f.Fuzz(func(t *testing.T, s string) {
		if o, err := DecodeOffer(s); err == nil {
			if _, err := DecodeOffer(o.Encode()); err != nil {
				t.Fatalf("re-decode of an accepted offer: %v", err)
			}
		}
		if n, err := DecodeNodeFirmware(s); err == nil {
			if _, err := DecodeNodeFirmware(n.Encode()); err != nil {
				t.Fatalf("re-decode of accepted state: %v", err)
			}
		}
	})
}

// The node sets AnnotationState through its status reports, which the hub
// applies only for sync/wire's NodeAnnotations.
func TestStateAnnotationIsANodeAnnotation(t *testing.T) {
	if AnnotationState != wire.AnnotationFirmware || !slices.Contains(wire.NodeAnnotations, AnnotationState) {
		t.Fatalf("%q is not sync/wire's firmware node annotation", AnnotationState)
	}
}
