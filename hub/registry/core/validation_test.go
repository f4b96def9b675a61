package core

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// validateCase is one object checked by its resource's Validate, after
// Default and PrepareForCreate.
type validateCase struct {
	name string
	obj  runtime.Object
	want []string
}

func runValidate(t *testing.T, plural string, cases []validateCase) {
	t.Helper()
	rules := rulesFor(plural)
	for _, tc := range cases {
		rules.Default(tc.obj)
		rules.PrepareForCreate(tc.obj)
		got := summary(rules.Validate(tc.obj))
		if !sameLines(got, tc.want) {
			t.Errorf("%s: Validate(%s) = %v, want %v", plural, tc.name, got, tc.want)
		}
	}
}

// updateCase is an update of a stored object, checked by Validate and
// ValidateUpdate after Default and PrepareForUpdate.
type updateCase struct {
	name     string
	old, obj runtime.Object
	want     []string
}

func runUpdate(t *testing.T, plural string, cases []updateCase) {
	t.Helper()
	rules := rulesFor(plural)
	for _, tc := range cases {
		rules.Default(tc.old)
		rules.PrepareForCreate(tc.old)
		tc.old.(metav1.Object).SetResourceVersion("5")
		tc.obj.(metav1.Object).SetResourceVersion("5")
		rules.Default(tc.obj)
		rules.PrepareForUpdate(tc.obj, tc.old)
		got := summary(dedupe(append(rules.Validate(tc.obj), rules.ValidateUpdate(tc.obj, tc.old)...)))
		if !sameLines(got, tc.want) {
			t.Errorf("%s: ValidateUpdate(%s) = %v, want %v", plural, tc.name, got, tc.want)
		}
	}
}

var meta = metav1.ObjectMeta{Name: "x", Namespace: "default"}

func svc(mutate func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
	mutate(s)
	return s
}

func TestValidateService(t *testing.T) {
	runValidate(t, "services", []validateCase{
		{"valid", svc(func(*corev1.Service) {}), nil},
		{"name not DNS-1035", svc(func(s *corev1.Service) { s.Name = "1web" }), want("metadata.name: Invalid value")},
		{"no ports", svc(func(s *corev1.Service) { s.Spec.Ports = nil }), want("spec.ports: Required value")},
		{"headless without ports", svc(func(s *corev1.Service) {
			s.Spec.Ports = nil
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}), nil},
		{"external name", svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "db.example.com."
			s.Spec.Ports = nil
		}), nil},
		{"external name missing", svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }),
			want("spec.externalName: Required value")},
		{"ports", svc(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "http", Port: 80},
				{Name: "http", Port: 0, Protocol: "HTTP"},
				{Port: 80},
				{Name: "Bad_Name", Port: 443, TargetPort: intstr.FromString("no such name!")},
			}
		}), want(
			"spec.ports[1].name: Duplicate value",
			"spec.ports[1].port: Invalid value",
			"spec.ports[1].protocol: Unsupported value",
			"spec.ports[1].targetPort: Invalid value",
			"spec.ports[2].name: Required value",
			"spec.ports[2]: Duplicate value",
			"spec.ports[3].name: Invalid value",
			"spec.ports[3].targetPort: Invalid value",
		)},
		{"node port on ClusterIP", svc(func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30080 }),
			want("spec.ports[0].nodePort: Forbidden")},
		{"node port on NodePort", svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		}), nil},
		{"bad type and affinity", svc(func(s *corev1.Service) {
			s.Spec.Type = "Internal"
			s.Spec.SessionAffinity = "Cookie"
		}), want("spec.type: Unsupported value", "spec.sessionAffinity: Unsupported value")},
		{"bad selector", svc(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app/": "web"} }),
			want("spec.selector: Invalid value", "spec.selector: Invalid value")}, // empty name part: two messages
		{"cluster IPs", svc(func(s *corev1.Service) {
			s.Spec.ClusterIP = "10.96.0.300"
		}), want("spec.clusterIPs[0]: Invalid value")},
		{"headless NodePort", svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}), want("spec.clusterIPs[0]: Invalid value")},
		{"external IPs", svc(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"127.0.0.1", "nope"} }),
			want("spec.externalIPs[0]: Invalid value", "spec.externalIPs[1]: Invalid value")},
		{"source ranges on ClusterIP", svc(func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"} }),
			want("spec.LoadBalancerSourceRanges: Forbidden")},
		{"load balancer", svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
		}), nil},
		{"traffic policy on internal service", svc(func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicy("Nearby"))
		}), want("spec.externalTrafficPolicy: Invalid value", "spec.internalTrafficPolicy: Unsupported value")},
	})
}

func TestValidateServiceUpdate(t *testing.T) {
	withIP := func(ip string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.ClusterIP = ip }
	}
	runUpdate(t, "services", []updateCase{
		{"same", svc(withIP("10.96.0.10")), svc(withIP("10.96.0.10")), nil},
		{"cluster IP left out", svc(withIP("10.96.0.10")), svc(func(*corev1.Service) {}), nil},
		{"cluster IP changed", svc(withIP("10.96.0.10")), svc(func(s *corev1.Service) {
			// As kubectl apply patches it: clusterIPs stays as stored.
			s.Spec.ClusterIP = "10.96.0.11"
			s.Spec.ClusterIPs = []string{"10.96.0.10"}
		}), want("spec.clusterIPs[0]: Invalid value")},
		{"cluster IP changed by a client that knows only clusterIP", svc(withIP("10.96.0.10")), svc(withIP("10.96.0.11")),
			want("spec.clusterIPs: Required value", "spec.clusterIPs[0]: Invalid value")},
		{"to ExternalName", svc(withIP("10.96.0.10")), svc(func(s *corev1.Service) {
			s.Spec.ClusterIP = "10.96.0.10"
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "db.example.com"
		}), nil},
		{"from ExternalName", svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "db.example.com"
		}), svc(withIP("10.96.0.12")), nil},
		{"node ports kept", svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		}), svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), nil},
		{"NodePort to ClusterIP", svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		}), svc(func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30080 }), nil},
	})

	// What PrepareForUpdate put back or dropped.
	rules := rulesFor("services")
	old := create("services", svc(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ClusterIP = "10.96.0.10"
		s.Spec.Ports[0].NodePort = 30080
	}))
	old.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "1.2.3.4"}}
	upd := svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	rules.Default(upd)
	rules.PrepareForUpdate(upd, old)
	if upd.Spec.ClusterIP != "10.96.0.10" || len(upd.Spec.ClusterIPs) != 1 || upd.Spec.Ports[0].NodePort != 30080 ||
		len(upd.Status.LoadBalancer.Ingress) != 1 || len(upd.Spec.IPFamilies) != 1 {
		t.Errorf("PrepareForUpdate(apply without allocated values) = %+v, want cluster IP, node port, families and status kept", upd)
	}
	toCIP := old.DeepCopy()
	toCIP.Spec.Type = corev1.ServiceTypeClusterIP
	toCIP.Spec.ExternalTrafficPolicy = ""
	rules.Default(toCIP)
	rules.PrepareForUpdate(toCIP, old)
	if toCIP.Spec.Ports[0].NodePort != 0 || toCIP.Spec.ExternalTrafficPolicy != "" {
		t.Errorf("PrepareForUpdate(NodePort to ClusterIP) = %+v, want node port and traffic policy dropped", toCIP.Spec)
	}
}

func TestValidateConfigMapAndSecret(t *testing.T) {
	big := strings.Repeat("x", corev1.MaxSecretSize)
	runValidate(t, "configmaps", []validateCase{
		{"valid", &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"app.conf": "a", "KEY_1": "b"}}, nil},
		{"bad keys", &corev1.ConfigMap{ObjectMeta: meta,
			Data:       map[string]string{"a/b": "x", "same": "y"},
			BinaryData: map[string][]byte{"..": {1}, "same": {2}},
		}, want("data[a/b]: Invalid value", "data[same]: Invalid value", "binaryData[..]: Invalid value")},
		{"too big", &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"a": big, "b": "x"}}, want("[]: Too long")}, // upstream's path for the whole object
	})
	runValidate(t, "secrets", []validateCase{
		{"valid", &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"password": "x"}}, nil},
		{"bad key", &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"my key": nil}}, want("data[my key]: Invalid value")},
		{"bad stringData key", &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"a b": "x"}}, want("data[a b]: Invalid value")},
		{"too big", &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"a": []byte(big), "b": {1}}}, want("data: Too long")},
		{"tls without key", &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": nil}},
			want("data[tls.key]: Required value")},
		{"docker config not JSON", &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{".dockerconfigjson": []byte("{")}}, want("data[.dockerconfigjson]: Invalid value")},
		{"token without account", &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeServiceAccountToken},
			want("metadata.annotations[kubernetes.io/service-account.name]: Required value")},
	})
	yes := ptrTo(true)
	runUpdate(t, "configmaps", []updateCase{
		{"data changed", &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"a": "1"}},
			&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"a": "2"}}, nil},
		{"immutable data changed", &corev1.ConfigMap{ObjectMeta: meta, Immutable: yes, Data: map[string]string{"a": "1"}},
			&corev1.ConfigMap{ObjectMeta: meta, Immutable: yes, Data: map[string]string{"a": "2"}}, want("data: Forbidden")},
		{"immutable unset", &corev1.ConfigMap{ObjectMeta: meta, Immutable: yes},
			&corev1.ConfigMap{ObjectMeta: meta}, want("immutable: Forbidden")},
	})
	runUpdate(t, "secrets", []updateCase{
		{"type changed", &corev1.Secret{ObjectMeta: meta},
			&corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeBasicAuth, StringData: map[string]string{"username": "u"}},
			want("type: Invalid value")},
		{"immutable data changed", &corev1.Secret{ObjectMeta: meta, Immutable: yes, StringData: map[string]string{"a": "1"}},
			&corev1.Secret{ObjectMeta: meta, Immutable: yes, StringData: map[string]string{"a": "2"}}, want("data: Forbidden")},
		{"immutable, same data", &corev1.Secret{ObjectMeta: meta, Immutable: yes, StringData: map[string]string{"a": "1"}},
			&corev1.Secret{ObjectMeta: meta, Immutable: yes, Data: map[string][]byte{"a": []byte("1")}}, nil},
	})
}

func TestValidateNamespaceAndNode(t *testing.T) {
	runValidate(t, "namespaces", []validateCase{
		{"valid", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, nil},
		{"not a DNS label", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team.a"}}, want("metadata.name: Invalid value")},
		{"namespaced", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "b"}}, want("metadata.namespace: Forbidden")},
		{"bad finalizer", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"},
			Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"cleanup"}}}, want("spec.finalizers[0]: Invalid value")},
	})
	runUpdate(t, "namespaces", []updateCase{
		{"label added", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"env": "prod"}}}, nil},
	})
	sv := rulesFor("namespaces").(apiserver.StatusValidator)
	ns := create("namespaces", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "3"}})
	bad := ns.DeepCopy()
	bad.Status.Phase = corev1.NamespaceTerminating
	if got := summary(sv.ValidateStatusUpdate(bad, ns)); !sameLines(got, want("status.Phase: Invalid value")) {
		t.Errorf("namespaces: ValidateStatusUpdate(Terminating without deletion) = %v", got)
	}

	node := func(mutate func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}
		mutate(n)
		return n
	}
	runValidate(t, "nodes", []validateCase{
		{"valid", node(func(n *corev1.Node) {
			n.Spec.PodCIDRs = []string{"10.244.1.0/24", "fd00:1::/64"}
			n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")}
		}), nil},
		{"bad taints and resources", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: "Never"}, {Key: "d", Effect: corev1.TaintEffectNoSchedule},
				{Key: "d", Effect: corev1.TaintEffectNoSchedule}}
			n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1500m")}
			n.Spec.PodCIDRs = []string{"10.244.1.0/24", "10.244.2.0/24"}
		}), want(
			"spec.taints[0].effect: Unsupported value",
			"spec.taints[2]: Duplicate value",
			"status.capacity.pods: Invalid value",
			"status.allocatable.pods: Invalid value",
			"spec.podCIDRs: Invalid value",
		)},
	})
	runUpdate(t, "nodes", []updateCase{
		{"cordon", node(func(*corev1.Node) {}), node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), nil},
		{"pod CIDR changed", node(func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.1.0/24"} }),
			node(func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.2.0/24"} }), want("spec.podCIDRs: Forbidden")},
		{"pod CIDR set", node(func(*corev1.Node) {}), node(func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.1.0/24" }), nil},
		{"podCIDR changed", node(func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.1.0/24" }),
			node(func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.2.0/24" }), want("spec.podCIDRs: Forbidden")},
		{"podCIDR changed, podCIDRs kept", node(func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.1.0/24"} }),
			node(func(n *corev1.Node) {
				n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.2.0/24", []string{"10.244.1.0/24"}
			}), want("spec.podCIDRs: Forbidden")},
		{"pod CIDR cleared", node(func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.1.0/24" }), node(func(*corev1.Node) {}), want("spec.podCIDRs: Forbidden")},
		{"podCIDR invalid", node(func(*corev1.Node) {}), node(func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.1.0" }), want("spec.podCIDRs[0]: Invalid value")},
		{"providerID set", node(func(*corev1.Node) {}), node(func(n *corev1.Node) { n.Spec.ProviderID = "outpost://edge-1" }), nil},
		{"providerID changed", node(func(n *corev1.Node) { n.Spec.ProviderID = "outpost://edge-1" }),
			node(func(n *corev1.Node) { n.Spec.ProviderID = "outpost://edge-2" }), want("spec.providerID: Forbidden")},
	})
	for _, tc := range []struct {
		name      string
		podCIDR   string
		podCIDRs  []string
		wantCIDR  string
		wantCIDRs []string
	}{
		{"none", "", nil, "", nil},
		{"podCIDR only", "10.244.1.0/24", nil, "10.244.1.0/24", []string{"10.244.1.0/24"}},
		{"podCIDRs only", "", []string{"10.244.1.0/24", "fd00:1::/64"}, "10.244.1.0/24", []string{"10.244.1.0/24", "fd00:1::/64"}},
		{"agreeing", "10.244.1.0/24", []string{"10.244.1.0/24", "fd00:1::/64"}, "10.244.1.0/24", []string{"10.244.1.0/24", "fd00:1::/64"}},
		{"podCIDR wins", "10.244.2.0/24", []string{"10.244.1.0/24", "fd00:1::/64"}, "10.244.2.0/24", []string{"10.244.2.0/24"}},
	} {
		n := create("nodes", node(func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = tc.podCIDR, tc.podCIDRs }))
		if n.Spec.PodCIDR != tc.wantCIDR || !slices.Equal(n.Spec.PodCIDRs, tc.wantCIDRs) {
			t.Errorf("nodes: Default(%s: podCIDR %q, podCIDRs %q) = %q, %q; want %q, %q", tc.name, tc.podCIDR, tc.podCIDRs,
				n.Spec.PodCIDR, n.Spec.PodCIDRs, tc.wantCIDR, tc.wantCIDRs)
		}
	}
}

func TestValidateOthers(t *testing.T) {
	runValidate(t, "serviceaccounts", []validateCase{
		{"valid", &corev1.ServiceAccount{ObjectMeta: meta}, nil},
		{"bad name", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "Builder", Namespace: "default"}}, want("metadata.name: Invalid value")},
	})
	event := func(mutate func(*corev1.Event)) *corev1.Event {
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "web.17a", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"},
			Reason:         "Pulled", Type: corev1.EventTypeNormal,
		}
		mutate(e)
		return e
	}
	runValidate(t, "events", []validateCase{
		{"valid", event(func(*corev1.Event) {}), nil},
		{"no involved object", event(func(e *corev1.Event) { e.InvolvedObject = corev1.ObjectReference{} }),
			want("involvedObject: Required value")},
		{"other namespace", event(func(e *corev1.Event) { e.InvolvedObject.Namespace = "kube-system" }),
			want("involvedObject.namespace: Invalid value")},
		{"new style without reporter", event(func(e *corev1.Event) { e.EventTime = metav1.NewMicroTime(t0) }),
			want("action: Required value", "reportingController: Required value", "reportingInstance: Required value",
				"reportingController: Invalid value", "reportingController: Invalid value")},
	})
	endpoints := func(subsets ...corev1.EndpointSubset) *corev1.Endpoints {
		return &corev1.Endpoints{ObjectMeta: meta, Subsets: subsets}
	}
	runValidate(t, "endpoints", []validateCase{
		{"valid", endpoints(corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}}, Ports: []corev1.EndpointPort{{Port: 80}}}), nil},
		{"bad", endpoints(
			corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Port: 80}}},
			corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: "127.0.0.1"}, {IP: "x"}},
				Ports: []corev1.EndpointPort{{Port: 80}, {Name: "b", Port: 0}}},
		), want(
			"subsets[0]: Required value",
			"subsets[1].addresses[0].ip: Invalid value",
			"subsets[1].addresses[1].ip: Invalid value",
			"subsets[1].addresses[1].ip: Invalid value",
			"subsets[1].ports[0].name: Required value",
			"subsets[1].ports[1].port: Invalid value",
		)},
	})
	q := func(pairs ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(pairs); i += 2 {
			l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return l
	}
	runValidate(t, "limitranges", []validateCase{
		{"valid", &corev1.LimitRange{ObjectMeta: meta, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{
			{Type: corev1.LimitTypeContainer, Max: q("cpu", "2"), Min: q("cpu", "100m")}}}}, nil},
		{"bad", &corev1.LimitRange{ObjectMeta: meta, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{
			{Type: corev1.LimitTypeContainer, Max: q("cpu", "1"), Min: q("cpu", "2")},
			{Type: corev1.LimitTypePod, Default: q("cpu", "1")},
			{Type: "Node"},
		}}}, want(
			"spec.limits[0].min[cpu]: Invalid value",
			"spec.limits[0].defaultRequest[cpu]: Invalid value",
			"spec.limits[0].default[cpu]: Invalid value",
			"spec.limits[1].default: Forbidden",
			"spec.limits[2].type: Invalid value",
		)},
	})
	quota := func(hard corev1.ResourceList, scopes ...corev1.ResourceQuotaScope) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{ObjectMeta: meta, Spec: corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes}}
	}
	runValidate(t, "resourcequotas", []validateCase{
		{"valid", quota(q("pods", "10", "requests.cpu", "4", "count/deployments.apps", "5")), nil},
		{"bad", quota(q("pods", "1500m", "cpus", "4", "requests.memory", "-1Gi")), want(
			"spec.hard[pods]: Invalid value",
			"spec.hard[cpus]: Invalid value",
			"spec.hard[cpus]: Invalid value",
			"spec.hard[requests.memory]: Invalid value",
		)},
		{"scopes", quota(q("pods", "1", "services", "1"), corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort),
			want("spec.scopes: Invalid value", "spec.scopes: Invalid value", "spec.scopes: Invalid value")},
	})
	runUpdate(t, "resourcequotas", []updateCase{
		{"hard raised", quota(q("pods", "10")), quota(q("pods", "20")), nil},
		{"scopes changed", quota(q("pods", "10")), quota(q("pods", "10"), corev1.ResourceQuotaScopeBestEffort), want("spec.scopes: Invalid value")},
	})
}
