package pods

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// testPod returns a pod "name" in "default" with UID "uid-name" and one
// container "main", changed by mods.
func testPod(name string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Generation: 1},
		Spec: corev1.PodSpec{
			NodeName:      "edge-1",
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "main", Image: "nginx"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func withPolicy(r corev1.RestartPolicy) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.RestartPolicy = r }
}

func withContainers(names ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers = nil
		for _, n := range names {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n, Image: "nginx"})
		}
	}
}

func withSidecar(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{
			Name: name, Image: "envoy", RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
		})
	}
}

func deleted(at time.Time, grace int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: at.Add(time.Duration(grace) * time.Second)}
		p.DeletionGracePeriodSeconds = &grace
	}
}

func running(name string, attempt int, since time.Time) runtime.ContainerStatus {
	return runtime.ContainerStatus{
		Name: name, ID: fmt.Sprintf("fake://%s-%d", name, attempt), Image: "nginx", State: runtime.StateRunning,
		Attempt: attempt, CreatedAt: since, StartedAt: since,
	}
}

func exited(name string, attempt int, code int32, at time.Time) runtime.ContainerStatus {
	c := running(name, attempt, at.Add(-time.Minute))
	c.State, c.ExitCode, c.FinishedAt, c.Reason = runtime.StateExited, code, at, "Error"
	if code == 0 {
		c.Reason = "Completed"
	}
	return c
}

func actualOfPod(p *corev1.Pod, cs ...runtime.ContainerStatus) runtime.PodStatus {
	return runtime.PodStatus{
		Pod:        runtime.PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name},
		Containers: cs,
		IP:         "10.88.0.1",
		CreatedAt:  t0,
	}
}

func actionStrings(d Decision) []string {
	var out []string
	for _, a := range d.Actions() {
		out = append(out, a.String())
	}
	return out
}

func TestPlan(t *testing.T) {
	now := t0.Add(time.Hour)
	web := testPod("web")
	tests := []struct {
		name     string
		desired  []*corev1.Pod
		actual   []runtime.PodStatus
		records  map[string]Record
		want     []string
		wantWake time.Time
	}{{
		name:    "new pod starts its containers",
		desired: []*corev1.Pod{testPod("web", withContainers("a", "b"))},
		want:    []string{"StartContainer default/web a attempt=0", "StartContainer default/web b attempt=0"},
	}, {
		name:    "adopted without records: nothing restarts",
		desired: []*corev1.Pod{web},
		actual:  []runtime.PodStatus{actualOfPod(web, running("main", 3, t0))},
	}, {
		name:    "pod without UID, nil pod and repeated UID are ignored",
		desired: []*corev1.Pod{nil, testPod("", func(p *corev1.Pod) { p.UID = "" }), web, testPod("web")},
		actual:  []runtime.PodStatus{actualOfPod(web, running("main", 0, t0))},
	}, {
		name:     "pod not desired: stopped with the least grace, nothing known of it",
		actual:   []runtime.PodStatus{actualOfPod(web, running("main", 0, t0))},
		want:     []string{"StopContainer default/web main grace=2s"},
		wantWake: now.Add(minGrace + stopSlack),
	}, {
		name:     "pod not desired: stopped with the grace its record keeps",
		actual:   []runtime.PodStatus{actualOfPod(web, running("main", 0, t0))},
		records:  map[string]Record{"uid-web": {Grace: 45 * time.Second}},
		want:     []string{"StopContainer default/web main grace=45s"},
		wantWake: now.Add(45*time.Second + stopSlack),
	}, {
		name:   "pod not desired and stopped: removed",
		actual: []runtime.PodStatus{actualOfPod(web, exited("main", 0, 0, t0))},
		want:   []string{"RemovePod default/web"},
	}, {
		name:    "stop in progress is not asked again before its deadline",
		desired: []*corev1.Pod{testPod("web", deleted(now, 30))},
		actual:  []runtime.PodStatus{actualOfPod(web, running("main", 0, t0))},
		records: map[string]Record{"uid-web": {Containers: map[string]ContainerRecord{
			"main": {Image: "nginx", Created: true, StopAt: now.Add(-30 * time.Second), StopGrace: 30 * time.Second},
		}}},
		wantWake: now.Add(stopSlack),
	}, {
		name:    "stop past its deadline is asked again without grace",
		desired: []*corev1.Pod{testPod("web", deleted(now, 30))},
		actual:  []runtime.PodStatus{actualOfPod(web, running("main", 0, t0))},
		records: map[string]Record{"uid-web": {Containers: map[string]ContainerRecord{
			"main": {Image: "nginx", Created: true, StopAt: now.Add(-35 * time.Second), StopGrace: 30 * time.Second},
		}}},
		want:     []string{"StopContainer default/web main grace=0s"},
		wantWake: now.Add(stopSlack),
	}, {
		name:     "deletion with a zero grace period still gets the least grace",
		desired:  []*corev1.Pod{testPod("web", deleted(now, 0))},
		actual:   []runtime.PodStatus{actualOfPod(web, running("main", 0, t0))},
		want:     []string{"StopContainer default/web main grace=2s"},
		wantWake: now.Add(minGrace + stopSlack),
	}, {
		name:    "deleted pod with nothing running is confirmed",
		desired: []*corev1.Pod{testPod("web", deleted(now, 30))},
		actual:  []runtime.PodStatus{actualOfPod(web, exited("main", 0, 143, now))},
		want:    []string{"ConfirmTerminated default/web"},
	}, {
		name:    "deleted pod is confirmed once",
		desired: []*corev1.Pod{testPod("web", deleted(now, 30))},
		records: map[string]Record{"uid-web": {Confirmed: true}},
	}, {
		name:     "deletion stops app containers before sidecars",
		desired:  []*corev1.Pod{testPod("web", withSidecar("proxy"), deleted(now, 30))},
		actual:   []runtime.PodStatus{actualOfPod(web, running("proxy", 0, t0), running("main", 0, t0))},
		want:     []string{"StopContainer default/web main grace=30s"},
		wantWake: now.Add(30*time.Second + stopSlack),
	}, {
		name:     "sidecars get what is left of the grace",
		desired:  []*corev1.Pod{testPod("web", withSidecar("proxy"), deleted(now, 30))},
		actual:   []runtime.PodStatus{actualOfPod(web, running("proxy", 0, t0), exited("main", 0, 0, now))},
		records:  map[string]Record{"uid-web": {TerminatingSince: now.Add(-20 * time.Second)}},
		want:     []string{"StopContainer default/web proxy grace=10s"},
		wantWake: now.Add(10*time.Second + stopSlack),
	}, {
		name:    "terminal phase from the hub: nothing starts",
		desired: []*corev1.Pod{testPod("web", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })},
	}, {
		name:    "container in an unknown state is stopped to be replaced",
		desired: []*corev1.Pod{web},
		actual: []runtime.PodStatus{actualOfPod(web, func() runtime.ContainerStatus {
			c := running("main", 2, t0)
			c.State = runtime.StateUnknown
			return c
		}())},
		want:     []string{"StopContainer default/web main grace=30s"},
		wantWake: now.Add(30*time.Second + stopSlack),
	}, {
		name:    "replaced container starts at once, without back-off",
		desired: []*corev1.Pod{testPod("web", withPolicy(corev1.RestartPolicyNever))},
		actual:  []runtime.PodStatus{actualOfPod(web, exited("main", 2, 137, now))},
		records: map[string]Record{"uid-web": {Containers: map[string]ContainerRecord{
			"main": {Image: "nginx", Attempt: 2, Created: true, Replace: true, CrashBackOff: BackOff{Delay: time.Minute, Since: now}},
		}}},
		want: []string{"StartContainer default/web main attempt=3"},
	}, {
		name:    "created but not started container is started again",
		desired: []*corev1.Pod{web},
		actual: []runtime.PodStatus{actualOfPod(web, func() runtime.ContainerStatus {
			c := running("main", 0, t0)
			c.State = runtime.StateCreated
			return c
		}())},
		want: []string{"StartContainer default/web main attempt=1"},
	}, {
		name:    "container the runtime lost is restarted (Always)",
		desired: []*corev1.Pod{web},
		actual:  []runtime.PodStatus{actualOfPod(web)},
		records: map[string]Record{"uid-web": {Containers: map[string]ContainerRecord{"main": {Image: "nginx", Attempt: 4, Created: true}}}},
		want:    []string{"StartContainer default/web main attempt=5"},
	}, {
		name:    "container the runtime lost is not restarted (Never)",
		desired: []*corev1.Pod{testPod("web", withPolicy(corev1.RestartPolicyNever))},
		records: map[string]Record{"uid-web": {Containers: map[string]ContainerRecord{"main": {Image: "nginx", Created: true}}}},
	}, {
		name:    "OnFailure: exit 0 is not restarted",
		desired: []*corev1.Pod{testPod("web", withPolicy(corev1.RestartPolicyOnFailure), withContainers("main", "other"))},
		actual:  []runtime.PodStatus{actualOfPod(web, exited("main", 0, 0, now), running("other", 0, t0))},
	}, {
		name: "unsupported volume: nothing starts",
		desired: []*corev1.Pod{testPod("web", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}}}}
		})},
	}, {
		name:    "records of pods gone from both are forgotten",
		records: map[string]Record{"uid-old": {Grace: time.Second}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Plan(tt.desired, tt.actual, tt.records, nil, now)
			if got := actionStrings(d); !slices.Equal(got, tt.want) {
				t.Errorf("Plan(%s) = %q, want %q", tt.name, got, tt.want)
			}
			if !d.NextWake.Equal(tt.wantWake) {
				t.Errorf("Plan(%s).NextWake = %v, want %v", tt.name, d.NextWake, tt.wantWake)
			}
		})
	}
}

func TestPlanForgetsGonePods(t *testing.T) {
	d := Plan(nil, nil, map[string]Record{"b": {}, "a": {}}, nil, t0)
	var got []string
	for _, p := range d.Pods {
		got = append(got, fmt.Sprintf("%s forget=%v", p.Pod.UID, p.Forget))
	}
	if want := []string{"a forget=true", "b forget=true"}; !slices.Equal(got, want) {
		t.Errorf("Plan(nil, nil, {a, b}) = %q, want %q", got, want)
	}
}

func TestPlanListsOnlyPodsWithNews(t *testing.T) {
	web := testPod("web")
	actual := []runtime.PodStatus{actualOfPod(web, running("main", 0, t0))}
	first := Plan([]*corev1.Pod{web}, actual, nil, nil, t0)
	if len(first.Pods) != 1 || len(first.Pods[0].Actions) != 0 {
		t.Fatalf("Plan(adopted, no record) = %+v, want one pod with a new record and no actions", first.Pods)
	}
	records := map[string]Record{"uid-web": first.Pods[0].Record}
	if again := Plan([]*corev1.Pod{web}, actual, records, nil, t0.Add(time.Minute)); len(again.Pods) != 0 {
		t.Errorf("Plan(adopted, its record) = %+v, want no pods", again.Pods)
	}
}

func TestPlanAdoptionDerivesRecord(t *testing.T) {
	web := testPod("web")
	created := t0.Add(-time.Hour)
	act := actualOfPod(web, running("main", 3, t0))
	act.CreatedAt = created
	d := Plan([]*corev1.Pod{web}, []runtime.PodStatus{act}, nil, nil, t0)
	rec := d.Pods[0].Record
	if c := rec.Containers["main"]; c.Attempt != 3 || !c.Created || c.Image != "nginx" {
		t.Errorf("Plan(adopted).Record.Containers[main] = %+v, want attempt 3, created, image nginx", c)
	}
	if !rec.FirstSeen.Equal(created) {
		t.Errorf("Plan(adopted).Record.FirstSeen = %v, want the pod's creation %v", rec.FirstSeen, created)
	}
}

func TestPlanStartSpec(t *testing.T) {
	uid, gid, priv := int64(1000), int64(2000), true
	pod := testPod("web", func(p *corev1.Pod) {
		p.Spec.Hostname = "box"
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid}
		p.Spec.Containers[0] = corev1.Container{
			Name: "main", Image: "nginx:1.27", Command: []string{"/bin/sh"}, Args: []string{"-c", "exec nginx"},
			WorkingDir: "/srv", ImagePullPolicy: corev1.PullAlways,
			Env: []corev1.EnvVar{
				{Name: "A", Value: "1"},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "C", Value: "3"},
			},
			SecurityContext: &corev1.SecurityContext{Privileged: &priv},
		}
	})
	a := Plan([]*corev1.Pod{pod}, nil, nil, nil, t0).Actions()[0]
	s := a.Spec
	got := fmt.Sprintf("%s %s %s %q %q %s %v host=%s user=%d group=%d priv=%v",
		s.Name, s.Image, s.PullPolicy, s.Command, s.Args, s.WorkingDir, s.Env, s.Hostname, *s.RunAsUser, *s.RunAsGroup, s.Privileged)
	want := `main nginx:1.27 Always ["/bin/sh"] ["-c" "exec nginx"] /srv [{A 1} {C 3}] host=box user=1000 group=2000 priv=true`
	if got != want {
		t.Errorf("Plan(web).Actions()[0].Spec = %s, want %s", got, want)
	}
	s.Command[0] = "changed"
	*s.RunAsUser = 0
	if pod.Spec.Containers[0].Command[0] != "/bin/sh" || uid != 1000 {
		t.Errorf("Plan's Spec shares memory with the pod")
	}
}

func TestActionString(t *testing.T) {
	ref := runtime.PodRef{UID: "u", Namespace: "ns", Name: "p"}
	for _, tt := range []struct {
		a    Action
		want string
	}{
		{Action{Type: StartContainer, Pod: ref, Container: "c", Attempt: 2}, "StartContainer ns/p c attempt=2"},
		{Action{Type: StopContainer, Pod: ref, Container: "c", Grace: 3 * time.Second}, "StopContainer ns/p c grace=3s"},
		{Action{Type: RemovePod, Pod: ref}, "RemovePod ns/p"},
		{Action{Type: ConfirmTerminated, Pod: ref}, "ConfirmTerminated ns/p"},
		{Action{Type: 9, Pod: ref}, "ActionType(9) ns/p"},
	} {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("Action.String() = %q, want %q", got, tt.want)
		}
	}
}

func TestUnsupported(t *testing.T) {
	vol := func(vs corev1.VolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: vs}} }
	}
	for _, tt := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{testPod("ok"), ""},
		{testPod("none", withContainers()), "pod has no containers"},
		{testPod("nameless", withContainers("a", "")), "invalid pod spec: a container has no name"},
		{testPod("twice", withContainers("a", "a")), `invalid pod spec: container name "a" is used twice`},
		{testPod("cm", vol(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}})), ""},
		{testPod("pvc", vol(corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{}})),
			`volume "v": persistentVolumeClaim volumes are not supported on this node`},
		{testPod("csi", vol(corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{}})),
			`volume "v": csi volumes are not supported on this node`},
		{testPod("token", vol(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{}}, {ConfigMap: &corev1.ConfigMapProjection{}},
		}}})), ""},
		{testPod("bundle", vol(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{}},
		}}})), `volume "v": projected clusterTrustBundle sources are not supported on this node`},
		{testPod("empty", vol(corev1.VolumeSource{})), `volume "v": unknown volumes are not supported on this node`},
	} {
		if got := unsupported(tt.pod); got != tt.want {
			t.Errorf("unsupported(%s) = %q, want %q", tt.pod.Name, got, tt.want)
		}
	}
}

func TestBackOff(t *testing.T) {
	// A container that crashes right after each restart: the delays kubelet
	// uses, up to the cap.
	var b BackOff
	now := t0
	var got []string
	for range 8 {
		b = b.next(now, now)
		got = append(got, b.Delay.String())
		if !b.holdsSince(now, now.Add(b.Delay-time.Second)) || b.holdsSince(now, now.Add(b.Delay)) {
			t.Fatalf("BackOff%+v.holdsSince(%v) wrong around its delay", b, now)
		}
		now = now.Add(b.Delay)
	}
	want := "10s 20s 40s 1m20s 2m40s 5m0s 5m0s 5m0s"
	if strings.Join(got, " ") != want {
		t.Errorf("BackOff.next delays = %s, want %s", strings.Join(got, " "), want)
	}
	// Ten minutes without a failure start it over.
	if n := b.next(now.Add(backOffReset+time.Second), now.Add(backOffReset+time.Second)); n.Delay != backOffInitial {
		t.Errorf("BackOff.next after %v = %v, want %v", backOffReset, n.Delay, backOffInitial)
	}
	if b.holdsSince(b.Since.Add(backOffReset+time.Second), b.Since.Add(backOffReset+time.Second)) {
		t.Errorf("BackOff.holdsSince a failure %v after its last move = true, want false", backOffReset)
	}
	if (BackOff{}).holds(t0) || (BackOff{}).holdsSince(t0, t0) {
		t.Errorf("zero BackOff holds, want it not to")
	}
}

func TestPullPolicy(t *testing.T) {
	for _, tt := range []struct {
		image  string
		policy corev1.PullPolicy
		want   runtime.PullPolicy
	}{
		{"nginx", "", runtime.PullAlways},
		{"nginx:latest", "", runtime.PullAlways},
		{"nginx:1.27", "", runtime.PullIfNotPresent},
		{"registry.local:5000/nginx", "", runtime.PullAlways},
		{"registry.local:5000/nginx:1.27", "", runtime.PullIfNotPresent},
		{"nginx@sha256:0123", "", runtime.PullIfNotPresent},
		{"nginx:1.27", corev1.PullNever, runtime.PullNever},
	} {
		if got := pullPolicy(&corev1.Container{Image: tt.image, ImagePullPolicy: tt.policy}); got != tt.want {
			t.Errorf("pullPolicy(%s, %q) = %s, want %s", tt.image, tt.policy, got, tt.want)
		}
	}
}
