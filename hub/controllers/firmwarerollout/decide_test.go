package firmwarerollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/rollout"
	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestSplitVersions(t *testing.T) {
	long := strings.Repeat("9", maxVersionLen+1)
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"1.0.0", []string{"1.0.0"}},
		{" 1.0.0, ,1.1.0,1.0.0 ", []string{"1.0.0", "1.1.0"}},
		{"1.0.0," + long + ",2.0.0", []string{"1.0.0", "2.0.0"}},
		{strings.Repeat("0.0.1,", maxFailedVersionsBytes) + "7.0.0", []string{"0.0.1", "7.0.0"}},
	}
	for _, tt := range tests {
		if got := splitVersions(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("splitVersions(%.40q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRecordFailed(t *testing.T) {
	var many []string
	for i := range 32 {
		many = append(many, "0."+strings.Repeat("1", i+1))
	}
	ours := &fwv1.Offer{Rollout: "ro", Release: "rel", Version: "2.0.0", Action: fwv1.OfferInstall}
	revert := &fwv1.Offer{Rollout: "ro", Release: "rel", Version: "2.0.0", Action: fwv1.OfferRevert}
	tests := []struct {
		name   string
		v      view
		want   string
		wantOK bool
	}{
		{"updated", view{state: rollout.Updated}, "", false},
		{"failed, first", view{state: rollout.Failed, offer: ours}, "2.0.0", true},
		{"reverted by itself", view{state: rollout.Reverted, failedAnn: []string{"1.0.0"}}, "1.0.0,2.0.0", true},
		{"already recorded", view{state: rollout.Failed, failedAnn: []string{"2.0.0"}}, "", false},
		{"revert ordered", view{state: rollout.Reverted, offer: revert}, "", false},
		{"full: the oldest goes", view{state: rollout.Failed, failedAnn: many}, strings.Join(append(many[1:], "2.0.0"), ","), true},
	}
	for _, tt := range tests {
		got, ok := recordFailed(&tt.v, "ro", "2.0.0", 32)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("recordFailed(%s) = %q, %v, want %q, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestWithdrawStray(t *testing.T) {
	offer := func(a fwv1.OfferAction) string {
		return (&fwv1.Offer{Rollout: "ro", Release: "rel", Version: "2.0.0", Action: a}).Encode()
	}
	state := func(s fwv1.FirmwareState) string {
		return (&fwv1.NodeFirmware{Version: "1.0.0", Target: "2.0.0", State: s}).Encode()
	}
	tests := []struct {
		name         string
		offer, st    string
		wantWithdraw bool
	}{
		{"idle", offer(fwv1.OfferInstall), "", true},
		{"downloading", offer(fwv1.OfferInstall), state(fwv1.StateDownloading), true},
		{"installing", offer(fwv1.OfferInstall), state(fwv1.StateInstalling), false},
		{"trial", offer(fwv1.OfferInstall), state(fwv1.StateTrial), false},
		{"updated", offer(fwv1.OfferInstall), state(fwv1.StateUpdated), true},
		{"reverting an update", offer(fwv1.OfferRevert), state(fwv1.StateUpdated), false},
		{"another rollout's", (&fwv1.Offer{Rollout: "other", Release: "r", Version: "2.0.0", Action: fwv1.OfferInstall}).Encode(), "", false},
		{"no offer", "", "", false},
	}
	for _, tt := range tests {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{}}}
		if tt.offer != "" {
			n.Annotations[fwv1.AnnotationOffer] = tt.offer
		}
		if tt.st != "" {
			n.Annotations[fwv1.AnnotationState] = tt.st
		}
		p, ok := withdrawStray(n, "ro")
		if ok != tt.wantWithdraw || ok && (p.offer == nil || *p.offer != "") {
			t.Errorf("withdrawStray(%s) = %+v, %v, want withdraw %v", tt.name, p, ok, tt.wantWithdraw)
		}
	}
}

// FuzzSee feeds arbitrary annotations to what the controller reads of a
// Node, and then to decide: nothing panics, the failed versions read stay
// bounded, and an offer is only ever written as this rollout's.
func FuzzSee(f *testing.F) {
	f.Add((&fwv1.NodeFirmware{Version: "1.0.0", Target: "2.0.0", State: fwv1.StateTrial}).Encode(),
		(&fwv1.Offer{Rollout: "ro", Release: "rel", Version: "2.0.0", Action: fwv1.OfferInstall}).Encode(), "1.0.0,1.1.0", true, "")
	f.Add(`{"state":"Failed","target":"2.0.0"}`, `{"action":"Revert"}`, ",,,", false, "../x")
	f.Add(`{`, `null`, strings.Repeat("x,", 5000), true, "Europe/Berlin")
	f.Fuzz(func(t *testing.T, state, offer, failed string, online bool, zone string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{
			fwv1.AnnotationState: state, fwv1.AnnotationOffer: offer, fwv1.AnnotationFailedVersions: failed,
			wire.AnnotationTimeZone: zone,
		}}}
		n.Status.Conditions = readyCondition(online, t0)
		v := see(n, "ro", "2.0.0", fwv1.NodeStatus{}, t0)
		if len(v.failedAnn) > maxFailedVersionsBytes/2+1 {
			t.Fatalf("%d failed versions read", len(v.failedAnn))
		}
		spec := rollout.Spec{Waves: []rollout.Step{{Percent: 100}}, Version: "2.0.0", Budget: rollout.Budget{Count: 1},
			Windows: []rollout.Window{{Start: "01:00", End: "05:00"}}}
		out := decide(input{name: "ro", release: "rel", spec: spec, nodes: []*corev1.Node{n}, olders: map[string]string{},
			now: t0.Add(time.Hour), cfg: DefaultConfig()})
		for _, p := range out.patches {
			if p.offer != nil && *p.offer != "" {
				o, err := fwv1.DecodeOffer(*p.offer)
				if err != nil || o.Rollout != "ro" || o.Version != "2.0.0" {
					t.Fatalf("wrote offer %q (%v)", *p.offer, err)
				}
			}
			if p.failed != nil && len(splitVersions(*p.failed)) > DefaultConfig().MaxFailedVersions {
				t.Fatalf("recorded %q", *p.failed)
			}
		}
	})
}

// TestMaintenanceWindowsInNodeZones: the windows open in each node's own
// time zone, as it reported it; a node whose zone is unknown is on UTC,
// and its status says so.
func TestMaintenanceWindowsInNodeZones(t *testing.T) {
	node := func(name, zone string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
		if zone != "" {
			n.Annotations[wire.AnnotationTimeZone] = zone
		}
		n.Status.Conditions = readyCondition(true, t0.Add(-time.Hour))
		return n
	}
	// t0 is Monday 10:00 UTC: 05:00 in New York, 11:00 in Berlin.
	nodes := []*corev1.Node{node("nyc", "America/New_York"), node("ber", "Europe/Berlin"),
		node("mars", "Mars/Olympus_Mons"), node("utc", ""), node("evil", "../../etc/passwd")}
	spec := rollout.Spec{Waves: []rollout.Step{{Percent: 100}}, Version: "2.0.0",
		Windows: []rollout.Window{{Start: "04:00", End: "06:00"}}}
	out := decide(input{name: "ro", release: "rel", spec: spec, nodes: nodes, olders: map[string]string{},
		now: t0, cfg: DefaultConfig()})
	var offered []string
	for _, p := range out.patches {
		if p.offer != nil && *p.offer != "" {
			offered = append(offered, p.name)
		}
	}
	if !slices.Equal(offered, []string{"nyc"}) {
		t.Errorf("offered to %q at 10:00 UTC with a 04:00-06:00 window, want only nyc (05:00 there)", offered)
	}
	msgs := map[string]string{}
	for _, ns := range out.status.Nodes {
		msgs[ns.Name] = ns.Message
	}
	for name, want := range map[string]string{"mars": "not known", "evil": "not a zone name", "utc": "", "ber": ""} {
		if got := msgs[name]; want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("node %s message %q, want it to contain %q", name, got, want)
		}
	}

	// Later that day, at 05:30 in Berlin (04:30 UTC the next day), Berlin
	// is in its window and New York (23:30) is not.
	out = decide(input{name: "ro", release: "rel", spec: spec, nodes: nodes[1:2], olders: map[string]string{},
		now: time.Date(2026, 3, 3, 4, 30, 0, 0, time.UTC), cfg: DefaultConfig()})
	if len(out.patches) != 1 || out.patches[0].offer == nil || *out.patches[0].offer == "" {
		t.Errorf("at 05:30 Berlin time: patches %+v, want an offer to ber", out.patches)
	}
}
