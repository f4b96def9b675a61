package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/eviction"
	edgeruntime "github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// lowMemory is a memory source of 1Gi with 50Mi available while low is
// set, under kubelet's default memory.available<100Mi, and 900Mi
// otherwise.
type lowMemory struct{ low atomic.Bool }

func (m *lowMemory) Memory() (limit, workingSet int64, err error) {
	if m.low.Load() {
		return 1 << 30, 1<<30 - 50<<20, nil
	}
	return 1 << 30, 124 << 20, nil
}

// statusSink keeps what the node reported: each pod's last status, the
// node's last status and the events, in order.
type statusSink struct {
	mu     sync.Mutex
	pods   map[string]corev1.PodStatus
	node   *corev1.Node
	events []corev1.Event
}

func (s *statusSink) ApplyStatus(ctx context.Context, node string, it wire.StatusItem) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	switch it.Kind {
	case wire.KindPodStatus:
		var p corev1.Pod
		if _, _, err = testCodec.Decode(it.Object, nil, &p); err == nil {
			s.pods[it.Key.Name] = p.Status
		}
	case wire.KindNodeStatus:
		var n corev1.Node
		if _, _, err = testCodec.Decode(it.Object, nil, &n); err == nil {
			s.node = &n
		}
	case wire.KindEvent:
		var ev corev1.Event
		if _, _, err = testCodec.Decode(it.Object, nil, &ev); err == nil {
			s.events = append(s.events, ev)
		}
	}
	if err != nil {
		return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	return nil
}

func (s *statusSink) pod(name string) corev1.PodStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[name]
}

// condition returns the status of the node's condition t as last
// reported, "" if none.
func (s *statusSink) condition(t corev1.NodeConditionType) corev1.ConditionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node == nil {
		return ""
	}
	for _, c := range s.node.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// event returns the first event of reason about an object of kind and
// name, or nil.
func (s *statusSink) event(kind, name, reason string) *corev1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.events {
		if o := s.events[i].InvolvedObject; o.Kind == kind && o.Name == name && s.events[i].Reason == reason {
			return &s.events[i]
		}
	}
	return nil
}

// TestMemoryPressureEviction: on a node whose memory runs low, the
// eviction manager evicts a BestEffort pod at once, reported Failed with
// kubelet's reason and message and events on the pod and the node, the
// node reports MemoryPressure, and a new BestEffort pod is rejected while
// it lasts; once memory is back, MemoryPressure stays for the transition
// period, in which a Burstable pod is admitted.
func TestMemoryPressureEviction(t *testing.T) {
	sink := &statusSink{pods: map[string]corev1.PodStatus{}}
	h := startHubWith(t, func(c *server.Config) { c.Sink = sink })
	dir := t.TempDir()
	rt := fake.New(fake.Config{})
	ta := newAgentConfig(t, dir, rt)
	ta.cfg.HubAddr, ta.cfg.Token, ta.cfg.CAHash = h.addr, h.auth.token, h.caHash
	mem := &lowMemory{}
	ec := eviction.DefaultConfig()
	// The memory threshold alone: the test's disk may be as full as it is.
	ec.Thresholds = []eviction.Threshold{eviction.DefaultThresholds()[0]}
	ec.Housekeeping = 20 * time.Millisecond
	ec.Memory = mem
	ta.cfg.Eviction = &ec
	run(t, ta)

	mk := func(name string, requests corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
				Name: "main", Image: "nginx:1.27", Resources: corev1.ResourceRequirements{Requests: requests},
			}}},
		}
	}
	rev := int64(0)
	apply := func(p *corev1.Pod) {
		t.Helper()
		rev++
		if err := h.x.Apply([]view.Event{{Revision: rev, Key: podKey(p.Name), Raw: encode(t, p)}}); err != nil {
			t.Fatal(err)
		}
	}
	apply(mk("be", nil))
	wait.For(t, waitLong, "be running", running(t, rt, "be"))
	wait.For(t, waitLong, "MemoryPressure=False reported", func() (bool, string) {
		c := sink.condition(corev1.NodeMemoryPressure)
		return c == corev1.ConditionFalse, string(c)
	})

	mem.low.Store(true)
	wait.For(t, waitLong, "be reported evicted", func() (bool, string) {
		st := sink.pod("be")
		return st.Phase == corev1.PodFailed, fmt.Sprintf("%s %s", st.Phase, st.Reason)
	})
	st := sink.pod("be")
	if want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "; st.Reason != "Evicted" || st.Message != want {
		t.Errorf("be: reason %q, message %q; want Evicted, %q", st.Reason, st.Message, want)
	}
	disrupted := false
	for _, c := range st.Conditions {
		disrupted = disrupted || c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet
	}
	if !disrupted {
		t.Errorf("be's conditions %+v lack DisruptionTarget=True", st.Conditions)
	}
	if p := runtimePod(t, rt, "be"); p != nil {
		if c := p.Container("main"); c != nil && c.State == edgeruntime.StateRunning {
			t.Errorf("be still runs after its eviction")
		}
	}
	wait.For(t, waitLong, "MemoryPressure=True reported", func() (bool, string) {
		c := sink.condition(corev1.NodeMemoryPressure)
		return c == corev1.ConditionTrue, string(c)
	})
	sink.mu.Lock()
	ns := sink.node.Status
	sink.mu.Unlock()
	eph, alloc := ns.Capacity[corev1.ResourceEphemeralStorage], ns.Allocatable[corev1.ResourceMemory]
	if eph.Sign() <= 0 || alloc.Value() != 2<<30-100<<20 || ns.NodeInfo.ContainerRuntimeVersion != "fake://test" {
		t.Errorf("node status: capacity %v, allocatable %v, runtime %q; want ephemeral-storage and memory less 100Mi", ns.Capacity, ns.Allocatable, ns.NodeInfo.ContainerRuntimeVersion)
	}
	wait.For(t, waitLong, "eviction events", func() (bool, string) {
		return sink.event("Pod", "be", "Evicted") != nil && sink.event("Node", node, "EvictionThresholdMet") != nil, fmt.Sprint(len(sink.events))
	})
	if ev := sink.event("Pod", "be", "Evicted"); ev.Type != corev1.EventTypeWarning || ev.Message != st.Message {
		t.Errorf("be's Evicted event: %s %q", ev.Type, ev.Message)
	}
	if ev := sink.event("Node", node, "EvictionThresholdMet"); ev.Message != "Attempting to reclaim memory" || ev.Namespace != metav1.NamespaceDefault {
		t.Errorf("the node's EvictionThresholdMet event: %s/%s %q", ev.Namespace, ev.Name, ev.Message)
	}

	// Under memory pressure a new BestEffort pod is rejected.
	apply(mk("late", nil))
	wait.For(t, waitLong, "late reported rejected", func() (bool, string) {
		st := sink.pod("late")
		return st.Phase == corev1.PodFailed, string(st.Phase)
	})
	if st := sink.pod("late"); st.Reason != "Evicted" || st.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " {
		t.Errorf("late: reason %q, message %q", st.Reason, st.Message)
	}
	if p := runtimePod(t, rt, "late"); p != nil && len(p.Containers) > 0 {
		t.Errorf("late, rejected, has containers: %+v", p.Containers)
	}

	// Memory is back; the condition holds for the transition period (5m),
	// in which a pod that is not BestEffort is admitted.
	mem.low.Store(false)
	apply(mk("burst", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("10Mi")}))
	wait.For(t, waitLong, "burst running", running(t, rt, "burst"))
	ta.afterRounds(t, 10)
	if c := sink.condition(corev1.NodeMemoryPressure); c != corev1.ConditionTrue {
		t.Errorf("MemoryPressure = %q within the transition period, want True", c)
	}
	if ok, why := running(t, rt, "burst")(); !ok || strings.Contains(sink.pod("burst").Reason, "Evicted") {
		t.Errorf("burst, admitted once memory was back, is not running: %s %s", why, sink.pod("burst").Reason)
	}
}
