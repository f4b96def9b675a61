package pods

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func TestStatusPhase(t *testing.T) {
	now := t0.Add(time.Hour)
	with := func(cs ...runtime.ContainerStatus) *runtime.PodStatus {
		a := actualOfPod(testPod("x"), cs...)
		return &a
	}
	replacing := Record{Containers: map[string]ContainerRecord{"main": {Image: "nginx", Created: true, Replace: true}}}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		actual *runtime.PodStatus
		rec    Record
		want   corev1.PodPhase
	}{
		{"nothing in the runtime", testPod("x"), nil, Record{}, corev1.PodPending},
		{"all running", testPod("x", withContainers("a", "b")), with(running("a", 0, t0), running("b", 0, t0)), Record{}, corev1.PodRunning},
		{"one of two started", testPod("x", withContainers("a", "b")), with(running("a", 0, t0)), Record{}, corev1.PodPending},
		{"Always, all exited", testPod("x"), with(exited("main", 0, 0, now)), Record{}, corev1.PodRunning},
		{"OnFailure, all exited 0", testPod("x", withPolicy(corev1.RestartPolicyOnFailure)), with(exited("main", 0, 0, now)), Record{}, corev1.PodSucceeded},
		{"OnFailure, failed and restarting", testPod("x", withPolicy(corev1.RestartPolicyOnFailure)), with(exited("main", 0, 1, now)), Record{}, corev1.PodRunning},
		{"Never, one failed", testPod("x", withPolicy(corev1.RestartPolicyNever), withContainers("a", "b")),
			with(exited("a", 0, 1, now), exited("b", 0, 0, now)), Record{}, corev1.PodFailed},
		{"Never, one failed, one running", testPod("x", withPolicy(corev1.RestartPolicyNever), withContainers("a", "b")),
			with(exited("a", 0, 1, now), running("b", 0, t0)), Record{}, corev1.PodRunning},
		{"Never, being replaced", testPod("x", withPolicy(corev1.RestartPolicyNever)), with(exited("main", 0, 0, now)), replacing, corev1.PodRunning},
		{"init running", testPod("x", func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}} }),
			with(running("init", 0, t0)), Record{}, corev1.PodPending},
		{"init failed, Never", testPod("x", withPolicy(corev1.RestartPolicyNever), func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
		}), with(exited("init", 0, 1, now)), Record{}, corev1.PodFailed},
		{"sidecar left running after main completed", testPod("x", withPolicy(corev1.RestartPolicyNever), withSidecar("proxy")),
			with(running("proxy", 0, t0), exited("main", 0, 0, now)), Record{}, corev1.PodRunning},
		{"deleted, stopped with 0", testPod("x", deleted(now, 30)), with(exited("main", 0, 0, now)), Record{}, corev1.PodSucceeded},
		{"deleted, stopped with 143", testPod("x", deleted(now, 30)), with(exited("main", 0, 143, now)), Record{}, corev1.PodFailed},
		{"deleted, still stopping", testPod("x", deleted(now, 30)), with(running("main", 0, t0)), Record{}, corev1.PodRunning},
		{"terminal phase sticks", testPod("x", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
			with(running("main", 0, t0)), Record{}, corev1.PodFailed},
		{"unsupported", testPod("x", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}}}}
		}), nil, Record{}, corev1.PodPending},
	}
	for _, tt := range tests {
		if got := Status(tt.pod, tt.actual, tt.rec, nil, now).Phase; got != tt.want {
			t.Errorf("Status(%s).Phase = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestStatusConditions(t *testing.T) {
	earlier := metav1.NewTime(t0.Add(-time.Hour))
	now := t0.Add(time.Hour)
	pod := testPod("web", func(p *corev1.Pod) {
		p.Generation = 7
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
			{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, LastTransitionTime: earlier},
			{Type: "example.com/lb", Status: corev1.ConditionFalse, LastTransitionTime: earlier},
		}
	})
	act := actualOfPod(pod, running("main", 0, t0))
	s := Status(pod, &act, Record{}, nil, now)
	var got []string
	for _, c := range s.Conditions {
		got = append(got, fmt.Sprintf("%s=%s %s %q at %s gen=%d", c.Type, c.Status, c.Reason, c.Message,
			c.LastTransitionTime.Sub(t0), c.ObservedGeneration))
	}
	want := []string{
		`example.com/lb=False  "" at -1h0m0s gen=0`, // not ours: kept as it is
		`PodReadyToStartContainers=True  "" at 1h0m0s gen=7`,
		`Initialized=True  "" at 1h0m0s gen=7`, // changed
		`Ready=False ReadinessGatesNotReady "the status of pod readiness gate \"example.com/lb\" is not \"True\", but False" at 1h0m0s gen=7`,
		`ContainersReady=True  "" at -1h0m0s gen=7`, // unchanged: its time kept
		`PodScheduled=True  "" at -1h0m0s gen=7`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Status(web).Conditions =\n%q\nwant\n%q", got, want)
	}
	if s.ObservedGeneration != 7 {
		t.Errorf("Status(web).ObservedGeneration = %d, want 7", s.ObservedGeneration)
	}
}

func TestStatusKeepsWhatOthersOwn(t *testing.T) {
	start := metav1.NewTime(t0.Add(-time.Hour))
	pod := testPod("web", func(p *corev1.Pod) {
		p.Status.QOSClass = corev1.PodQOSBurstable
		p.Status.HostIP = "192.168.1.10"
		p.Status.HostIPs = []corev1.HostIP{{IP: "192.168.1.10"}}
		p.Status.NominatedNodeName = "edge-2"
		p.Status.StartTime = &start
		p.Status.PodIP = "10.88.9.9"
	})
	act := actualOfPod(pod, running("main", 0, t0))
	s := Status(pod, &act, Record{FirstSeen: t0}, nil, t0.Add(time.Hour))
	got := fmt.Sprintf("%s %s %v %s %s %s %v", s.QOSClass, s.HostIP, s.HostIPs, s.NominatedNodeName, s.StartTime.Sub(t0), s.PodIP, s.PodIPs)
	want := "Burstable 192.168.1.10 [{192.168.1.10}] edge-2 -1h0m0s 10.88.0.1 [{10.88.0.1}]"
	if got != want {
		t.Errorf("Status(web) = %s, want %s", got, want)
	}
	// The result shares no memory with the pod.
	s.HostIPs[0].IP = "changed"
	s.Conditions[0].Status = "changed"
	if pod.Status.HostIPs[0].IP != "192.168.1.10" {
		t.Errorf("Status(web) shares HostIPs with the pod")
	}
	// Without a previous start time: the record's, else now.
	pod.Status.StartTime = nil
	if s := Status(pod, &act, Record{FirstSeen: t0}, nil, t0.Add(time.Hour)); !s.StartTime.Equal(&metav1.Time{Time: t0}) {
		t.Errorf("Status(web).StartTime = %v, want the record's %v", s.StartTime, t0)
	}
}

func TestStatusContainers(t *testing.T) {
	now := t0.Add(time.Hour)
	last := &Termination{ExitCode: 2, Reason: "Error", FinishedAt: t0, ContainerID: "fake://old"}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		actual []runtime.ContainerStatus
		rec    ContainerRecord
		want   string
	}{{
		name: "never started",
		pod:  testPod("x"),
		want: "waiting ContainerCreating restarts=0 last=<nil> ready=false started=false id=",
	}, {
		name:   "running after a crash",
		pod:    testPod("x"),
		actual: []runtime.ContainerStatus{running("main", 3, t0)},
		rec:    ContainerRecord{Attempt: 3, Created: true, LastTermination: last},
		want:   "running  restarts=3 last=2 ready=true started=true id=fake://main-3",
	}, {
		name:   "exited, restart imminent: terminated, last is the run before",
		pod:    testPod("x"),
		actual: []runtime.ContainerStatus{exited("main", 3, 1, now)},
		rec:    ContainerRecord{Attempt: 3, Created: true, LastTermination: last},
		want:   "terminated Error restarts=3 last=2 ready=false started=false id=fake://main-3",
	}, {
		name:   "exited, backing off: waiting, last is this run",
		pod:    testPod("x"),
		actual: []runtime.ContainerStatus{exited("main", 3, 1, now)},
		rec:    ContainerRecord{Attempt: 3, Created: true, LastTermination: last, Reason: ReasonCrashLoopBackOff, Message: "back-off"},
		want:   "waiting CrashLoopBackOff restarts=3 last=1 ready=false started=false id=fake://main-3",
	}, {
		name:   "exited for good with a stale reason: terminated",
		pod:    testPod("x", withPolicy(corev1.RestartPolicyNever)),
		actual: []runtime.ContainerStatus{exited("main", 0, 1, now)},
		rec:    ContainerRecord{Created: true, Reason: ReasonCrashLoopBackOff},
		want:   "terminated Error restarts=0 last=<nil> ready=false started=false id=fake://main-0",
	}, {
		name: "pull failed",
		pod:  testPod("x"),
		rec:  ContainerRecord{Reason: ReasonErrImagePull, Message: "no such image"},
		want: "waiting ErrImagePull restarts=0 last=<nil> ready=false started=false id=",
	}, {
		name: "lost while running (prev status running)",
		pod: testPod("x", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: "main", RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}}
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
		}),
		want: "waiting ContainerCreating restarts=2 last=137 ready=false started=false id=",
	}, {
		name:   "created, not started",
		pod:    testPod("x"),
		actual: []runtime.ContainerStatus{func() runtime.ContainerStatus { c := running("main", 0, t0); c.State = runtime.StateCreated; return c }()},
		want:   "waiting  restarts=0 last=<nil> ready=false started=false id=fake://main-0",
	}}
	for _, tt := range tests {
		var act *runtime.PodStatus
		if tt.actual != nil {
			a := actualOfPod(tt.pod, tt.actual...)
			act = &a
		}
		rec := Record{Containers: map[string]ContainerRecord{"main": tt.rec}}
		s := Status(tt.pod, act, rec, nil, now)
		if len(s.ContainerStatuses) != 1 {
			t.Fatalf("Status(%s).ContainerStatuses = %+v, want one", tt.name, s.ContainerStatuses)
		}
		if got := formatContainerStatus(&s.ContainerStatuses[0]); got != tt.want {
			t.Errorf("Status(%s).ContainerStatuses[0] = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func formatContainerStatus(c *corev1.ContainerStatus) string {
	state, reason := "", ""
	switch st := c.State; {
	case st.Running != nil:
		state = "running"
	case st.Terminated != nil:
		state, reason = "terminated", st.Terminated.Reason
	case st.Waiting != nil:
		state, reason = "waiting", st.Waiting.Reason
	}
	last := "<nil>"
	if lt := c.LastTerminationState.Terminated; lt != nil {
		last = fmt.Sprint(lt.ExitCode)
	}
	return fmt.Sprintf("%s %s restarts=%d last=%s ready=%v started=%v id=%s",
		state, reason, c.RestartCount, last, c.Ready, c.Started != nil && *c.Started, c.ContainerID)
}
