package endpointslice

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func service(mut ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "svc-uid", Labels: map[string]string{"team": "a"},
			CreationTimestamp: metav1.NewTime(t0)},
		Spec: corev1.ServiceSpec{
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  "10.43.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
				{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9090)},
			},
		},
	}
	for _, m := range mut {
		m(s)
	}
	return s
}

// pod is a pod of the service on node with ip, ready or not, with the
// named container port http on httpPort (none when 0).
func pod(name, node, ip string, ready bool, httpPort int32, mut ...func(*corev1.Pod)) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"), Labels: map[string]string{"app": "web"},
			CreationTimestamp: metav1.NewTime(t0.Add(time.Minute))},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(t0.Add(2 * time.Minute))}},
		},
	}
	if ip != "" {
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	if httpPort != 0 {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort, Protocol: corev1.ProtocolTCP}}
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

var nodes = map[string]*corev1.Node{
	"zoned": {ObjectMeta: metav1.ObjectMeta{Name: "zoned", Labels: map[string]string{corev1.LabelTopologyZone: "z1", LabelSite: "s1"}}},
	"sited": {ObjectMeta: metav1.ObjectMeta{Name: "sited", Labels: map[string]string{LabelSite: "store-42"}}},
	"bare":  {ObjectMeta: metav1.ObjectMeta{Name: "bare"}},
}

func node(n string) *corev1.Node { return nodes[n] }

// render prints groups compactly: "type ports: pod(addr ready/serving/
// terminating node zone hint) ...".
func render(groups []Group) string {
	var out []string
	for _, g := range groups {
		var ports []string
		for _, p := range g.Ports {
			ports = append(ports, fmt.Sprintf("%s=%d", *p.Name, *p.Port))
		}
		var eps []string
		for _, ep := range g.Endpoints {
			eps = append(eps, renderEndpoint(ep))
		}
		out = append(out, fmt.Sprintf("%s [%s]: %s", g.AddressType, strings.Join(ports, ","), strings.Join(eps, " ")))
	}
	return strings.Join(out, "\n")
}

func renderEndpoint(ep discoveryv1.Endpoint) string {
	b := func(p *bool) string {
		if p == nil {
			return "-"
		}
		if *p {
			return "T"
		}
		return "F"
	}
	hint := "-"
	if ep.Hints != nil {
		hint = ep.Hints.ForZones[0].Name
	}
	s := fmt.Sprintf("%s(%s %s%s%s %s %s %s", ep.TargetRef.Name, strings.Join(ep.Addresses, ","),
		b(ep.Conditions.Ready), b(ep.Conditions.Serving), b(ep.Conditions.Terminating), deref(ep.NodeName), deref(ep.Zone), hint)
	if ep.Hostname != nil {
		s += " host=" + *ep.Hostname
	}
	return s + ")"
}

func TestDesired(t *testing.T) {
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Hour)} }
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		pods []*corev1.Pod
		want string
	}{
		{"ready and not ready, zone and site hints", service(), []*corev1.Pod{
			pod("a", "zoned", "10.42.0.1", true, 8080),
			pod("b", "sited", "10.42.1.1", false, 8080),
			pod("c", "bare", "10.42.2.1", true, 8080),
		}, "IPv4 [http=8080,metrics=9090]: a(10.42.0.1 TTF zoned z1 z1) b(10.42.1.1 FFF sited  store-42) c(10.42.2.1 TTF bare  -)"},
		{"named port resolved per pod, missing leaves it out", service(), []*corev1.Pod{
			pod("a", "bare", "10.42.0.1", true, 8080),
			pod("b", "bare", "10.42.0.2", true, 8081),
			pod("c", "bare", "10.42.0.3", true, 0),
		}, "IPv4 [http=8080,metrics=9090]: a(10.42.0.1 TTF bare  -)\n" +
			"IPv4 [http=8081,metrics=9090]: b(10.42.0.2 TTF bare  -)\n" +
			"IPv4 [metrics=9090]: c(10.42.0.3 TTF bare  -)"},
		{"terminating: not ready, serving as ready", service(), []*corev1.Pod{
			pod("a", "bare", "10.42.0.1", true, 8080, deleting),
			pod("b", "bare", "10.42.0.2", false, 8080, deleting),
		}, "IPv4 [http=8080,metrics=9090]: a(10.42.0.1 FTT bare  -) b(10.42.0.2 FFT bare  -)"},
		{"publishNotReadyAddresses", service(func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }), []*corev1.Pod{
			pod("a", "bare", "10.42.0.1", false, 8080),
			pod("b", "bare", "10.42.0.2", false, 8080, deleting),
		}, "IPv4 [http=8080,metrics=9090]: a(10.42.0.1 TTF bare  -) b(10.42.0.2 TTT bare  -)"},
		{"no IP, finished, other namespace: left out", service(), []*corev1.Pod{
			pod("a", "bare", "", true, 8080),
			pod("b", "bare", "10.42.0.2", false, 8080, func(p *corev1.Pod) {
				p.Spec.RestartPolicy = corev1.RestartPolicyNever
				p.Status.Phase = corev1.PodSucceeded
			}),
			pod("c", "bare", "10.42.0.3", true, 8080, func(p *corev1.Pod) { p.Namespace = "other" }),
			pod("d", "", "10.42.0.4", true, 8080),
		}, "IPv4 [http=8080,metrics=9090]: d(10.42.0.4 TTF   -)"},
		{"dual-stack pod in an IPv6 service", service(func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }), []*corev1.Pod{
			pod("a", "bare", "10.42.0.1", true, 8080, func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd42::1"}) }),
			pod("b", "bare", "10.42.0.2", true, 8080),
		}, "IPv6 [http=8080,metrics=9090]: a(fd42::1 TTF bare  -)"},
		{"hostname for the service's subdomain", service(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }), []*corev1.Pod{
			pod("a", "bare", "10.42.0.1", true, 8080, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "a", "web" }),
			pod("b", "bare", "10.42.0.2", true, 8080, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "b", "other" }),
		}, "IPv4 [http=8080,metrics=9090]: a(10.42.0.1 TTF bare  - host=a) b(10.42.0.2 TTF bare  -)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(Desired(tc.svc, tc.pods, node))
			if got != tc.want {
				t.Errorf("Desired =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// slice is an existing managed slice named name holding the endpoints of
// the given pods (from g), with the metadata Reconcile gives.
func existingSlice(name string, svc *corev1.Service, g Group, pods ...string) *discoveryv1.EndpointSlice {
	s := newSlice(sliceMeta(svc, time.Time{}), g.AddressType, g.Ports)
	s.Name, s.GenerateName, s.ResourceVersion = name, "", "1"
	for _, ep := range g.Endpoints {
		if slices.Contains(pods, ep.TargetRef.Name) {
			s.Endpoints = append(s.Endpoints, ep)
		}
	}
	return s
}

// podsNamed returns ready pods with the given names on node "bare".
func podsNamed(names ...string) []*corev1.Pod {
	var out []*corev1.Pod
	for i, n := range names {
		out = append(out, pod(n, "bare", fmt.Sprintf("10.42.%d.%d", i/250, i%250+1), true, 8080))
	}
	return out
}

func names(n int, prefix string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("%s%03d", prefix, i))
	}
	return out
}

// renderPlan prints a plan as "create N[pods], update NAME[pods], delete NAME".
func renderPlan(p Plan) string {
	var out []string
	podNames := func(s *discoveryv1.EndpointSlice) string {
		var n []string
		for _, ep := range s.Endpoints {
			n = append(n, ep.TargetRef.Name)
		}
		if len(n) > 5 {
			return fmt.Sprintf("%s..%s(%d)", n[0], n[len(n)-1], len(n))
		}
		return strings.Join(n, ",")
	}
	for _, s := range p.Create {
		out = append(out, fmt.Sprintf("create[%s]", podNames(s)))
	}
	for _, s := range p.Update {
		out = append(out, fmt.Sprintf("update %s[%s]", s.Name, podNames(s)))
	}
	for _, s := range p.Delete {
		out = append(out, "delete "+s.Name)
	}
	return strings.Join(out, " ")
}

func TestReconcile(t *testing.T) {
	svc := service()
	group := func(pods []*corev1.Pod) Group {
		gs := Desired(svc, pods, node)
		if len(gs) != 1 {
			t.Fatalf("want one group, got %s", render(gs))
		}
		return gs[0]
	}
	all := podsNamed(names(5, "p")...)
	g5 := group(all)
	notReady := slices.Clone(all)
	notReady[2] = pod("p002", "bare", all[2].Status.PodIP, false, 8080)
	big := podsNamed(names(250, "p")...)
	gBig := group(big)
	emptyPlaceholder := newSlice(sliceMeta(svc, time.Time{}), discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{})
	emptyPlaceholder.Name = "web-empty"
	other := newSlice(sliceMeta(svc, time.Time{}), discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: ptr("old"), Port: ptr(int32(1))}})
	other.Name = "web-old"

	for _, tc := range []struct {
		name     string
		pods     []*corev1.Pod
		existing []*discoveryv1.EndpointSlice
		max      int
		want     string
	}{
		{"new service: one slice", all, nil, 0, "create[p000,p001,p002,p003,p004]"},
		{"in sync: nothing", all, []*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000", "p001", "p002", "p003", "p004")}, 0, ""},
		{"readiness change updates the slice holding it", notReady,
			[]*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000", "p001"), existingSlice("web-b", svc, g5, "p002", "p003", "p004")}, 0,
			"update web-b[p002,p003,p004]"},
		{"a pod gone: its slice shrinks, the other stays", all[1:],
			[]*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000", "p001"), existingSlice("web-b", svc, g5, "p002", "p003", "p004")}, 0,
			"update web-a[p001]"},
		{"a slice emptied is deleted", all[2:],
			[]*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000", "p001"), existingSlice("web-b", svc, g5, "p002", "p003", "p004")}, 0,
			"delete web-a"},
		{"new pods fill the slice being updated", all,
			[]*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000", "p001", "gone")}, 0,
			"update web-a[p000,p001,p002,p003,p004]"},
		{"new pods go to the fullest slice with room", all,
			[]*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000"), existingSlice("web-b", svc, g5, "p001", "p002")}, 3,
			"update web-a[p000,p003,p004]"},
		{"no room: a new slice", all,
			[]*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000", "p001", "p002")}, 3,
			"create[p003,p004]"},
		{"250 pods: three slices of at most 100", big, nil, 0,
			"create[p000..p099(100)] create[p100..p199(100)] create[p200..p249(50)]"},
		{"max lowered: the excess moves to a new slice", big, []*discoveryv1.EndpointSlice{existingSlice("web-a", svc, gBig, names(250, "p")...)}, 0,
			"create[p100..p199(100)] create[p200..p249(50)] update web-a[p000..p099(100)]"},
		{"ports changed: the old group's slice takes the new ports, as upstream", all, []*discoveryv1.EndpointSlice{other}, 0,
			"update web-old[p000,p001,p002,p003,p004]"},
		{"no pods: a placeholder", nil, nil, 0, "create[]"},
		{"no pods any more: the last slice becomes the placeholder", nil,
			[]*discoveryv1.EndpointSlice{existingSlice("web-a", svc, g5, "p000")}, 0, "update web-a[]"},
		{"placeholder kept", nil, []*discoveryv1.EndpointSlice{emptyPlaceholder}, 0, ""},
		{"placeholder reused once pods come", all, []*discoveryv1.EndpointSlice{emptyPlaceholder}, 0,
			"update web-empty[p000,p001,p002,p003,p004]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var groups []Group
			if len(tc.pods) > 0 {
				groups = []Group{group(tc.pods)}
			}
			before := fmt.Sprint(tc.existing)
			p := Reconcile(svc, groups, tc.existing, tc.max, time.Time{})
			if got := renderPlan(p); got != tc.want {
				t.Errorf("Reconcile = %q, want %q", got, tc.want)
			}
			if fmt.Sprint(tc.existing) != before {
				t.Errorf("Reconcile modified its input")
			}
			for _, s := range append(p.Create, p.Update...) {
				if s.Labels[discoveryv1.LabelServiceName] != "web" || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy || s.Labels["team"] != "a" ||
					len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "svc-uid" || !*s.OwnerReferences[0].Controller {
					t.Errorf("slice metadata %+v", s.ObjectMeta)
				}
				if max := max(tc.max, 0); (max == 0 && len(s.Endpoints) > MaxEndpointsPerSlice) || (max > 0 && len(s.Endpoints) > max) {
					t.Errorf("slice with %d endpoints", len(s.Endpoints))
				}
			}
		})
	}
}

// TestReconcileLabelsChanged: a change of the service's labels rewrites
// the slices' labels; a change of the trigger time alone writes nothing.
func TestReconcileLabelsChanged(t *testing.T) {
	svc := service()
	pods := podsNamed("a")
	groups := Desired(svc, pods, node)
	cur := existingSlice("web-a", svc, groups[0], "a")
	if p := Reconcile(svc, groups, []*discoveryv1.EndpointSlice{cur}, 0, t0.Add(time.Hour)); !p.Empty() {
		t.Fatalf("trigger time only: %s", renderPlan(p))
	}
	relabelled := service(func(s *corev1.Service) { s.Labels = map[string]string{"team": "b"} })
	p := Reconcile(relabelled, groups, []*discoveryv1.EndpointSlice{cur}, 0, t0.Add(time.Hour))
	if len(p.Update) != 1 || p.Update[0].Labels["team"] != "b" || p.Update[0].Annotations[corev1.EndpointsLastChangeTriggerTime] != "2025-06-01T13:00:00Z" {
		t.Fatalf("relabel: %s %+v", renderPlan(p), p.Update)
	}
	headless := service(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })
	p = Reconcile(headless, groups, nil, 0, time.Time{})
	if _, ok := p.Create[0].Labels[corev1.IsHeadlessService]; !ok {
		t.Fatalf("headless slice labels %v", p.Create[0].Labels)
	}
}

func TestTriggerTime(t *testing.T) {
	svc := service()
	p := pod("a", "bare", "10.42.0.1", true, 8080)
	if got := TriggerTime(svc, []*corev1.Pod{p}); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("TriggerTime = %v, want the ready transition", got)
	}
	p.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Hour)}
	p.DeletionGracePeriodSeconds = ptr(int64(30))
	if got := TriggerTime(svc, []*corev1.Pod{p}); !got.Equal(t0.Add(time.Hour - 30*time.Second)) {
		t.Errorf("TriggerTime = %v, want the delete", got)
	}
}

func TestTracker(t *testing.T) {
	tr := newTracker()
	s := func(name, rv string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	if tr.stale("k", nil) {
		t.Fatal("stale with nothing written")
	}
	tr.wrote("k", s("a", "10"))
	tr.deleted("k", "b")
	if !tr.stale("k", []*discoveryv1.EndpointSlice{s("b", "5")}) {
		t.Fatal("cache without a, with b: want stale")
	}
	if !tr.stale("k", []*discoveryv1.EndpointSlice{s("a", "9")}) {
		t.Fatal("cache with an older a: want stale")
	}
	if tr.stale("k", []*discoveryv1.EndpointSlice{s("a", "12")}) {
		t.Fatal("cache with a newer a and no b: want fresh")
	}
	tr.wrote("k", s("c", "20"))
	tr.observedDelete("k", "c")
	if tr.stale("k", nil) {
		t.Fatal("a slice seen deleted: want fresh")
	}
}
