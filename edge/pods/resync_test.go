package pods

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reported returns the status the agent reports of a pod running one
// ready container, as Status computes it.
func reported(t *testing.T) corev1.PodStatus {
	t.Helper()
	pod := testPod("web")
	act := actualOfPod(pod, running("main", 0, t0))
	act.IP = "10.42.0.7"
	st := Status(pod, &act, Record{FirstSeen: t0}, nil, t0.Add(time.Second))
	st.HostIP, st.HostIPs = "192.168.1.5", []corev1.HostIP{{IP: "192.168.1.5"}}
	if c := findCondition(st.Conditions, corev1.PodReady); st.Phase != corev1.PodRunning || c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("reported: phase %s, conditions %v; want Running and Ready", st.Phase, st.Conditions)
	}
	return st
}

func setCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	if i := slices.IndexFunc(st.Conditions, func(x corev1.PodCondition) bool { return x.Type == c.Type }); i >= 0 {
		st.Conditions[i] = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

func TestNeedsResend(t *testing.T) {
	later := metav1.NewTime(t0.Add(time.Hour))
	disruption := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager", LastTransitionTime: later}
	tests := []struct {
		name string
		hub  func(*corev1.PodStatus) // changes the hub's copy of what the agent reported
		want bool
	}{
		{"the same", func(*corev1.PodStatus) {}, false},
		{"times to the second", func(s *corev1.PodStatus) {
			s.StartTime = &metav1.Time{Time: s.StartTime.Add(300 * time.Millisecond)}
			s.ContainerStatuses[0].State.Running.StartedAt.Time = s.ContainerStatuses[0].State.Running.StartedAt.Truncate(time.Second)
		}, false},
		{"condition times", func(s *corev1.PodStatus) {
			for i := range s.Conditions {
				s.Conditions[i].LastTransitionTime = later
				s.Conditions[i].LastProbeTime = later
			}
		}, false},
		{"conditions in another order", func(s *corev1.PodStatus) { slices.Reverse(s.Conditions) }, false},
		{"a condition others own added", func(s *corev1.PodStatus) { setCondition(s, disruption) }, false},
		{"PodScheduled changed", func(s *corev1.PodStatus) {
			setCondition(s, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse})
		}, false},
		{"qosClass and nominatedNodeName", func(s *corev1.PodStatus) {
			s.QOSClass, s.NominatedNodeName = corev1.PodQOSGuaranteed, "gw-2"
		}, false},
		{"container fields the agent does not set", func(s *corev1.PodStatus) {
			s.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{}
			s.ContainerStatuses[0].User = &corev1.ContainerUser{}
		}, false},
		{"Ready set False by a controller", func(s *corev1.PodStatus) {
			c := *findCondition(s.Conditions, corev1.PodReady)
			c.Status, c.LastTransitionTime = corev1.ConditionFalse, later
			setCondition(s, c)
		}, true},
		{"ContainersReady reason", func(s *corev1.PodStatus) {
			c := *findCondition(s.Conditions, corev1.ContainersReady)
			c.Reason = "Other"
			setCondition(s, c)
		}, true},
		{"Initialized gone", func(s *corev1.PodStatus) {
			s.Conditions = slices.DeleteFunc(s.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodInitialized })
		}, true},
		{"PodReadyToStartContainers message", func(s *corev1.PodStatus) {
			c := *findCondition(s.Conditions, corev1.PodReadyToStartContainers)
			c.Message = "x"
			setCondition(s, c)
		}, true},
		{"phase", func(s *corev1.PodStatus) { s.Phase = corev1.PodPending }, true},
		{"reason", func(s *corev1.PodStatus) { s.Reason = "NodeLost" }, true},
		{"pod IP", func(s *corev1.PodStatus) { s.PodIPs = nil }, true},
		{"host IP", func(s *corev1.PodStatus) { s.HostIP = "192.168.1.6" }, true},
		{"start time", func(s *corev1.PodStatus) { s.StartTime = &later }, true},
		{"no start time", func(s *corev1.PodStatus) { s.StartTime = nil }, true},
		{"container not ready", func(s *corev1.PodStatus) { s.ContainerStatuses[0].Ready = false }, true},
		{"restart count", func(s *corev1.PodStatus) { s.ContainerStatuses[0].RestartCount = 3 }, true},
		{"no container statuses", func(s *corev1.PodStatus) { s.ContainerStatuses = nil }, true},
		{"the pod as created", func(s *corev1.PodStatus) { *s = corev1.PodStatus{Phase: corev1.PodPending} }, true},
	}
	for _, tt := range tests {
		ours := reported(t)
		hub := ours.DeepCopy()
		tt.hub(hub)
		if got := NeedsResend(hub, &ours); got != tt.want {
			t.Errorf("NeedsResend(%s) = %v, want %v", tt.name, got, tt.want)
		}
		if got := NeedsResend(&ours, hub); got != tt.want {
			t.Errorf("NeedsResend(%s), the other way round, = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMergeHub(t *testing.T) {
	ours := reported(t)
	later := metav1.NewTime(t0.Add(time.Hour))
	disruption := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager", LastTransitionTime: later}
	gate := corev1.PodCondition{Type: "example.com/lb", Status: corev1.ConditionTrue, LastTransitionTime: later}

	hub := ours.DeepCopy()
	c := *findCondition(hub.Conditions, corev1.PodReady)
	c.Status = corev1.ConditionFalse
	setCondition(hub, c) // a controller's, which the agent's replaces
	setCondition(hub, disruption)
	setCondition(hub, gate)
	hub.NominatedNodeName = "gw-2"
	hub.PodIP, hub.PodIPs = "", nil
	ours.Conditions = append(ours.Conditions, corev1.PodCondition{Type: "example.com/old", Status: corev1.ConditionTrue})
	before := ours.DeepCopy()
	hubBefore := hub.DeepCopy()

	m := MergeHub(&ours, hub)
	if !reflect.DeepEqual(&ours, before) || !reflect.DeepEqual(hub, hubBefore) {
		t.Fatal("MergeHub modified its arguments")
	}
	want := ours.DeepCopy()
	want.NominatedNodeName = "gw-2"
	want.Conditions = []corev1.PodCondition{disruption, gate}
	for _, c := range ours.Conditions {
		if kubeletConditions[c.Type] {
			want.Conditions = append(want.Conditions, c)
		}
	}
	if !reflect.DeepEqual(&m, want) {
		t.Errorf("MergeHub = %+v\nwant %+v", m, want)
	}
	if NeedsResend(&m, &ours) {
		t.Errorf("MergeHub changed what the agent owns")
	}
	m.Conditions[0].Reason = "changed"
	if hub.Conditions[len(hub.Conditions)-2].Reason == "changed" {
		t.Errorf("MergeHub's result shares the hub's conditions")
	}

	// A terminal phase on the hub stays.
	hub = ours.DeepCopy()
	hub.Phase, hub.Reason, hub.Message = corev1.PodFailed, "Evicted", "gone"
	if m := MergeHub(&ours, hub); m.Phase != corev1.PodFailed || m.Reason != "Evicted" || m.Message != "gone" {
		t.Errorf("MergeHub with the hub's Failed = %s %q %q, want Failed Evicted gone", m.Phase, m.Reason, m.Message)
	}
	// Ours wins over the hub's non-terminal one.
	hub.Phase, hub.Reason = corev1.PodPending, "x"
	if m := MergeHub(&ours, hub); m.Phase != corev1.PodRunning || m.Reason != "" {
		t.Errorf("MergeHub with the hub's Pending = %s %q, want Running, no reason", m.Phase, m.Reason)
	}
}

// TestMergeHubIntoStatus: the conditions others own on the hub survive
// the agent's next status, and a readiness gate set True there makes the
// pod Ready.
func TestMergeHubIntoStatus(t *testing.T) {
	pod := testPod("web", func(p *corev1.Pod) {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	})
	act := actualOfPod(pod, running("main", 0, t0))
	now := t0.Add(time.Minute)
	last := Status(pod, &act, Record{FirstSeen: t0}, nil, now)
	if c := findCondition(last.Conditions, corev1.PodReady); c.Status != corev1.ConditionFalse {
		t.Fatalf("Ready before the gate = %s, want False", c.Status)
	}
	hub := last.DeepCopy()
	setCondition(hub, corev1.PodCondition{Type: "example.com/lb", Status: corev1.ConditionTrue})
	setCondition(hub, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue})
	p := *pod
	p.Status = MergeHub(&last, hub)
	st := Status(&p, &act, Record{FirstSeen: t0}, nil, now.Add(time.Minute))
	if c := findCondition(st.Conditions, corev1.PodReady); c.Status != corev1.ConditionTrue {
		t.Errorf("Ready after the gate = %s %s, want True", c.Status, c.Message)
	}
	if findCondition(st.Conditions, corev1.DisruptionTarget) == nil {
		t.Errorf("DisruptionTarget dropped: %v", st.Conditions)
	}
}

func TestResync(t *testing.T) {
	const interval = 10 * time.Second
	s1 := reported(t) // Running and Ready
	s0 := *s1.DeepCopy()
	s0.Phase, s0.ContainerStatuses = corev1.PodPending, nil // an earlier report
	s2 := *s1.DeepCopy()
	s2.ContainerStatuses[0].RestartCount = 1 // a later one
	marked := *s1.DeepCopy()
	c := *findCondition(marked.Conditions, corev1.PodReady)
	c.Status = corev1.ConditionFalse
	setCondition(&marked, c) // by a controller
	scheduled := corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}

	type step struct {
		sent   *corev1.PodStatus // reported before the check, if not nil
		before *corev1.PodStatus // the hub's copy when sent was, if known
		hub    *corev1.PodStatus // the hub's copy at the check
		last   *corev1.PodStatus // the last report at the check
		at     time.Duration
		resend bool
		retry  time.Duration // 0 for none
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"the hub shows the last report", []step{
			{sent: &s1, hub: &s1, last: &s1, resend: false},
		}},
		{"the hub lags behind", []step{
			{sent: &s0, hub: &s0, last: &s0},
			{sent: &s1, hub: &s0, last: &s1, resend: false},
			{sent: &s2, hub: &s0, last: &s2, resend: false},
			{hub: &s1, last: &s2, resend: false},
			{hub: &s2, last: &s2, resend: false},
		}},
		{"a controller changed it", []step{
			{sent: &s1, hub: &s1, last: &s1},
			{hub: &marked, last: &s1, at: time.Second, resend: true},
		}},
		{"a controller changed it after the hub lagged", []step{
			{sent: &s0, hub: &s0, last: &s0},
			{sent: &s1, hub: &s0, last: &s1},
			{hub: &marked, last: &s1, resend: true},
		}},
		{"a controller that keeps changing it is answered once per interval", []step{
			{sent: &s1, hub: &marked, last: &s1, at: time.Second, resend: true},
			{sent: &s1, hub: &s1, last: &s1, at: 2 * time.Second},
			{hub: &marked, last: &s1, at: 3 * time.Second, resend: false, retry: 11 * time.Second},
			{hub: &marked, last: &s1, at: 10 * time.Second, resend: false, retry: 11 * time.Second},
			{hub: &marked, last: &s1, at: 11 * time.Second, resend: true},
			{sent: &s1, hub: &marked, last: &s1, at: 12 * time.Second, resend: false, retry: 21 * time.Second},
		}},
		{"the hub still shows its copy from before the first report", []step{
			{sent: &s1, before: &scheduled, hub: &scheduled, last: &s1, resend: false},
			{hub: &scheduled, last: &s1, at: time.Second, resend: false},
			{hub: &s1, last: &s1, at: 2 * time.Second, resend: false},
			{hub: &marked, last: &s1, at: 3 * time.Second, resend: true},
		}},
		{"nothing known of earlier reports (a restart)", []step{
			{hub: &s0, last: &s1, resend: true},
		}},
		{"the hub shows an earlier report again after the later one", []step{
			{sent: &s0, hub: &s0, last: &s0},
			{sent: &s1, hub: &s1, last: &s1},
			{hub: &s0, last: &s1, at: time.Second, resend: true},
		}},
	}
	for _, tt := range tests {
		var r Resync
		for i, s := range tt.steps {
			if s.sent != nil {
				r.Sent(s.sent, s.before)
			}
			resend, retry := r.Check(s.hub, s.last, t0.Add(s.at), interval)
			var wantRetry time.Time
			if s.retry != 0 {
				wantRetry = t0.Add(s.retry)
			}
			if resend != s.resend || !retry.Equal(wantRetry) {
				t.Errorf("%s: step %d: Check = %v, %v; want %v, %v", tt.name, i, resend, retry, s.resend, wantRetry)
			}
			if resend {
				r.Sent(s.last, s.hub)
			}
		}
	}
}

func TestResyncBounded(t *testing.T) {
	var r Resync
	st := reported(t)
	for i := range 3 * maxUnconfirmed {
		st.ContainerStatuses[0].RestartCount = int32(i)
		r.Sent(&st, nil)
	}
	if len(r.unconfirmed) != maxUnconfirmed {
		t.Errorf("Resync remembers %d reports, want %d", len(r.unconfirmed), maxUnconfirmed)
	}
}
