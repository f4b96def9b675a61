package quota

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var now = time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)

// list parses "name=quantity" pairs into a ResourceList.
func list(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		n, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(n)] = resource.MustParse(q)
	}
	return out
}

func container(name string, requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func pod(cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Containers: cs}}
}

func TestUsage(t *testing.T) {
	finished := pod(container("c", list("cpu=1"), nil))
	finished.Status.Phase = corev1.PodSucceeded
	pastGrace := pod(container("c", list("cpu=1"), nil))
	pastGrace.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)}
	pastGrace.DeletionGracePeriodSeconds = new(int64(30))
	inGrace := pastGrace.DeepCopy()
	inGrace.DeletionGracePeriodSeconds = new(int64(300))
	withInit := pod(container("a", list("cpu=500m", "memory=100Mi"), list("cpu=1")), container("b", list("cpu=250m", "example.com/dongle=2", "hugepages-2Mi=4Mi"), nil))
	withInit.Spec.InitContainers = []corev1.Container{container("init", list("cpu=2"), nil)}
	nodePort := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}, {Port: 443}}}}
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	lbNoPorts := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: new(false), Ports: []corev1.ServicePort{{Port: 80}, {Port: 81, NodePort: 30001}}}}
	pvc := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: new("gold"), Resources: corev1.VolumeResourceRequirements{Requests: list("storage=1500m")}}}
	pvc.Status.AllocatedResources = list("storage=1Gi")
	tests := []struct {
		name string
		gr   schema.GroupResource
		obj  runtime.Object
		want corev1.ResourceList
	}{
		{"empty pod", Pods, pod(container("c", nil, nil)), list("count/pods=1", "pods=1")},
		{"finished pod", Pods, finished, list("count/pods=1")},
		{"pod past grace", Pods, pastGrace, list("count/pods=1")},
		{"pod in grace", Pods, inGrace, list("count/pods=1", "pods=1", "cpu=1", "requests.cpu=1")},
		{"init containers by max", Pods, withInit, list("count/pods=1", "pods=1", "cpu=2", "requests.cpu=2", "memory=100Mi", "requests.memory=100Mi",
			"limits.cpu=1", "requests.example.com/dongle=2", "hugepages-2Mi=4Mi", "requests.hugepages-2Mi=4Mi")},
		{"cluster IP service", Services, &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
			list("count/services=1", "services=1", "services.nodeports=0", "services.loadbalancers=0")},
		{"node port service", Services, nodePort, list("count/services=1", "services=1", "services.nodeports=2", "services.loadbalancers=0")},
		{"load balancer", Services, lb, list("count/services=1", "services=1", "services.nodeports=1", "services.loadbalancers=1")},
		{"load balancer without node ports", Services, lbNoPorts, list("count/services=1", "services=1", "services.nodeports=1", "services.loadbalancers=1")},
		{"claim", Claims, pvc, list("count/persistentvolumeclaims=1", "persistentvolumeclaims=1", "requests.storage=1Gi",
			"gold.storageclass.storage.k8s.io/persistentvolumeclaims=1", "gold.storageclass.storage.k8s.io/requests.storage=1Gi")},
		{"secret", Secrets, &corev1.Secret{}, list("count/secrets=1", "secrets=1")},
		{"replica set", ReplicaSets, &appsv1.ReplicaSet{}, list("count/replicasets.apps=1")},
	}
	for _, tt := range tests {
		got, err := Usage(tt.gr, tt.obj, now)
		if err != nil || !Equal(got, tt.want) {
			t.Errorf("%s: Usage = %v, %v, want %v", tt.name, Format(got), err, Format(tt.want))
		}
	}
}

func TestUsageErrors(t *testing.T) {
	if _, err := Usage(schema.GroupResource{Resource: "nodes"}, &corev1.Node{}, now); err == nil {
		t.Error("Usage(nodes) = nil error, want ErrNotCounted")
	}
	if _, err := Usage(Pods, &corev1.Service{}, now); err == nil {
		t.Error("Usage(pods, a Service) = nil error, want one")
	}
}

func TestMatching(t *testing.T) {
	names := Names(list("pods=1", "cpu=1", "services=1", "count/replicasets.apps=1", "requests.example.com/dongle=1",
		"requests.storage=1", "gold.storageclass.storage.k8s.io/requests.storage=1", "services.nodeports=1", "count/pods=1"))
	tests := []struct {
		gr   schema.GroupResource
		want string
	}{
		{Pods, "count/pods,cpu,pods,requests.example.com/dongle"},
		{Services, "services,services.nodeports"},
		{ReplicaSets, "count/replicasets.apps"},
		{Claims, "gold.storageclass.storage.k8s.io/requests.storage,requests.storage"},
		{Secrets, ""},
		{schema.GroupResource{Resource: "nodes"}, ""},
	}
	for _, tt := range tests {
		if got := FormatNames(Matching(tt.gr, names)); got != tt.want {
			t.Errorf("Matching(%v) = %s, want %s", tt.gr, got, tt.want)
		}
	}
}

func TestInScopes(t *testing.T) {
	bestEffort := pod(container("c", nil, nil))
	burstable := pod(container("c", list("cpu=100m"), nil))
	terminating := burstable.DeepCopy()
	terminating.Spec.ActiveDeadlineSeconds = new(int64(3600))
	classed := bestEffort.DeepCopy()
	classed.Spec.PriorityClassName = "high"
	affinity := bestEffort.DeepCopy()
	affinity.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{NamespaceSelector: &metav1.LabelSelector{}}}}}
	scope := func(name corev1.ResourceQuotaScope) corev1.ScopedResourceSelectorRequirement {
		return corev1.ScopedResourceSelectorRequirement{ScopeName: name, Operator: corev1.ScopeSelectorOpExists}
	}
	in := func(op corev1.ScopeSelectorOperator, values ...string) corev1.ScopedResourceSelectorRequirement {
		return corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: op, Values: values}
	}
	tests := []struct {
		name   string
		gr     schema.GroupResource
		obj    runtime.Object
		scopes []corev1.ScopedResourceSelectorRequirement
		want   bool
	}{
		{"no scopes", Secrets, &corev1.Secret{}, nil, true},
		{"scoped secret", Secrets, &corev1.Secret{}, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeNotTerminating)}, false},
		{"terminating", Pods, terminating, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeTerminating)}, true},
		{"not terminating", Pods, terminating, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeNotTerminating)}, false},
		{"best effort", Pods, bestEffort, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeBestEffort)}, true},
		{"burstable not best effort", Pods, burstable, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeNotBestEffort)}, true},
		{"burstable best effort", Pods, burstable, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeBestEffort)}, false},
		{"both scopes", Pods, terminating, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeTerminating), scope(corev1.ResourceQuotaScopeNotBestEffort)}, true},
		{"class in", Pods, classed, []corev1.ScopedResourceSelectorRequirement{in(corev1.ScopeSelectorOpIn, "high", "low")}, true},
		{"class not in", Pods, classed, []corev1.ScopedResourceSelectorRequirement{in(corev1.ScopeSelectorOpNotIn, "high")}, false},
		{"class exists", Pods, bestEffort, []corev1.ScopedResourceSelectorRequirement{in(corev1.ScopeSelectorOpExists)}, false},
		{"class does not exist", Pods, bestEffort, []corev1.ScopedResourceSelectorRequirement{in(corev1.ScopeSelectorOpDoesNotExist)}, false},
		{"cross-namespace affinity", Pods, affinity, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeCrossNamespacePodAffinity)}, true},
		{"no cross-namespace affinity", Pods, bestEffort, []corev1.ScopedResourceSelectorRequirement{scope(corev1.ResourceQuotaScopeCrossNamespacePodAffinity)}, false},
	}
	for _, tt := range tests {
		got, err := InScopes(tt.gr, tt.obj, tt.scopes)
		if err != nil || got != tt.want {
			t.Errorf("%s: InScopes = %v, %v, want %v", tt.name, got, err, tt.want)
		}
	}
}

func TestScopes(t *testing.T) {
	q := &corev1.ResourceQuota{Spec: corev1.ResourceQuotaSpec{
		Scopes:        []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort},
		ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"x"}}}},
	}}
	got := Scopes(q)
	if len(got) != 2 || got[0].ScopeName != corev1.ResourceQuotaScopeBestEffort || got[0].Operator != corev1.ScopeSelectorOpExists || got[1].ScopeName != corev1.ResourceQuotaScopePriorityClass {
		t.Errorf("Scopes = %v", got)
	}
}

func TestUsed(t *testing.T) {
	names := Names(list("pods=1", "requests.cpu=1", "count/pods=1", "services=1"))
	finished := pod(container("c", list("cpu=1"), nil))
	finished.Status.Phase = corev1.PodFailed
	objs := []runtime.Object{pod(container("c", list("cpu=250m"), nil)), pod(container("c", list("cpu=500m"), nil)), finished}
	got, err := Used(Pods, names, nil, objs, now)
	if want := list("pods=2", "requests.cpu=750m", "count/pods=3"); err != nil || !Equal(got, want) {
		t.Errorf("Used(pods) = %v, %v, want %v", Format(got), err, Format(want))
	}
	got, err = Used(Pods, names, nil, nil, now)
	if want := list("pods=0", "requests.cpu=0", "count/pods=0"); err != nil || !Equal(got, want) {
		t.Errorf("Used(no pods) = %v, %v, want %v", Format(got), err, Format(want))
	}
	be := []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopeBestEffort, Operator: corev1.ScopeSelectorOpExists}}
	got, err = Used(Pods, names, be, append(objs, pod(container("c", nil, nil))), now)
	if want := list("pods=1", "requests.cpu=0", "count/pods=1"); err != nil || !Equal(got, want) {
		t.Errorf("Used(best effort) = %v, %v, want %v", Format(got), err, Format(want))
	}
}

func TestPodConstraints(t *testing.T) {
	p := pod(container("a", list("cpu=1"), nil), container("b", nil, list("memory=1Gi")))
	err := PodConstraints(p, Names(list("requests.cpu=1", "limits.memory=1", "pods=1")))
	if want := "must specify limits.memory for: a; requests.cpu for: b"; err == nil || err.Error() != want {
		t.Errorf("PodConstraints = %v, want %s", err, want)
	}
	if err := PodConstraints(p, Names(list("pods=1", "requests.storage=1"))); err != nil {
		t.Errorf("PodConstraints(no compute) = %v, want nil", err)
	}
}

func TestArithmetic(t *testing.T) {
	a, b := list("cpu=1", "memory=1Gi"), list("cpu=500m", "pods=2")
	if got, want := Add(a, b), list("cpu=1500m", "memory=1Gi", "pods=2"); !Equal(got, want) {
		t.Errorf("Add = %v, want %v", Format(got), Format(want))
	}
	if got, want := SubtractNonNegative(b, a), list("cpu=0", "pods=2"); !Equal(got, want) {
		t.Errorf("SubtractNonNegative = %v, want %v", Format(got), Format(want))
	}
	if got := Exceeded(list("cpu=2", "pods=1", "memory=1"), list("cpu=1", "pods=1")); FormatNames(got) != "cpu" {
		t.Errorf("Exceeded = %v, want cpu", got)
	}
	if got := RemoveZeros(list("cpu=0", "pods=1")); !Equal(got, list("pods=1")) {
		t.Errorf("RemoveZeros = %v", Format(got))
	}
	if got := Negative(list("cpu=-1", "pods=1")); FormatNames(got) != "cpu" {
		t.Errorf("Negative = %v", got)
	}
	if got := Format(list("pods=1", "cpu=500m")); got != "cpu=500m,pods=1" {
		t.Errorf("Format = %s", got)
	}
}
