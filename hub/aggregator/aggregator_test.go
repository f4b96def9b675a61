package aggregator

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

func TestDecide(t *testing.T) {
	onstart := LocalAPIService(schema.GroupVersion{Group: "apps", Version: "v1"}, Priority{17800, 15}, ManagedOnStart)
	continuous := LocalAPIService(schema.GroupVersion{Group: "example.com", Version: "v1"}, crdPriority, ManagedContinuously)
	changed := func(s *apiregistrationv1.APIService) *apiregistrationv1.APIService {
		s = s.DeepCopy()
		s.Spec.GroupPriorityMinimum = 5
		return s
	}
	unmanaged := changed(continuous)
	unmanaged.Labels = nil
	tests := []struct {
		name            string
		desired, curr   *apiregistrationv1.APIService
		synced, atStart bool
		want            action
	}{
		{"neither", nil, nil, false, false, none},
		{"built-in missing at start", onstart, nil, false, false, create},
		{"built-in deleted after start", onstart, nil, true, false, none},
		{"built-in changed before start", onstart, changed(onstart), false, true, update},
		{"built-in changed after start", onstart, changed(onstart), true, true, none},
		{"built-in made by someone after start", onstart, changed(onstart), false, false, none},
		{"crd version missing", continuous, nil, true, false, create},
		{"crd version changed", continuous, changed(continuous), true, true, update},
		{"crd version as wanted", continuous, continuous.DeepCopy(), true, true, none},
		{"crd version gone", nil, continuous, true, true, remove},
		{"not managed", continuous, unmanaged, true, true, none},
		{"not managed, not wanted", nil, unmanaged, true, true, none},
		{"onstart left from before, not served now", nil, onstart, false, true, remove},
	}
	for _, tt := range tests {
		if got := decide(tt.desired, tt.curr, tt.synced, tt.atStart); got != tt.want {
			t.Errorf("decide(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestBuiltinPriority(t *testing.T) {
	for gv, want := range map[schema.GroupVersion]Priority{
		{Version: "v1"}:                               {18000, 1},
		{Group: "apps", Version: "v1"}:                {17800, 15},
		{Group: "autoscaling", Version: "v2"}:         {17500, 30},
		{Group: "events.k8s.io", Version: "v1"}:       {17750, 15},
		{Group: "metrics.k8s.io", Version: "v1beta1"}: crdPriority,
	} {
		if got := BuiltinPriority(gv); got != want {
			t.Errorf("BuiltinPriority(%v) = %v, want %v", gv, got, want)
		}
	}
}

func TestServiceCondition(t *testing.T) {
	s := &apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1",
		Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server", Port: new(int32(443))}}}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	otherPort := svc.DeepCopy()
	otherPort.Spec.Ports[0].Port = 8443
	external := otherPort.DeepCopy()
	external.Spec.Type = corev1.ServiceTypeExternalName
	slice := func(port string, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	}
	tests := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		reason string // "" for checks passed
	}{
		{"no service", nil, nil, "ServiceNotFound"},
		{"no such port", otherPort, nil, "ServicePortError"},
		{"no slices", svc, nil, "EndpointsNotFound"},
		{"unready", svc, []*discoveryv1.EndpointSlice{slice("https", false, "10.42.0.9")}, "MissingEndpoints"},
		{"other port name", svc, []*discoveryv1.EndpointSlice{slice("metrics", true, "10.42.0.9")}, "MissingEndpoints"},
		{"no address", svc, []*discoveryv1.EndpointSlice{slice("https", true)}, "MissingEndpoints"},
		{"ready", svc, []*discoveryv1.EndpointSlice{slice("https", false, "10.42.0.8"), slice("https", true, "10.42.0.9")}, ""},
		{"external name: no port or endpoint checks", external, nil, ""},
	}
	for _, tt := range tests {
		cond, passed := serviceCondition(s, tt.svc, tt.slices)
		if passed != (tt.reason == "") || cond.Reason != tt.reason || !passed && (cond.Status != apiregistrationv1.ConditionFalse || !strings.Contains(cond.Message, "metrics-server")) {
			t.Errorf("serviceCondition(%s) = %+v, %v; want reason %q", tt.name, cond, passed, tt.reason)
		}
	}
}

func TestSetUserHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("Authorization", "Bearer x")
	h.Set("Impersonate-User", "bob")
	h.Set("X-Remote-User", "mallory")
	h.Set("X-Remote-Extra-Scopes", "all")
	h.Set("Accept", "application/json")
	setUserHeaders(h, User{Name: "alice", UID: "42", Groups: []string{"dev", "system:authenticated"}, Extra: map[string][]string{"site/zone": {"a", "b"}}})
	want := http.Header{
		"Accept":                     {"application/json"},
		"X-Remote-User":              {"alice"},
		"X-Remote-Uid":               {"42"},
		"X-Remote-Group":             {"dev", "system:authenticated"},
		"X-Remote-Extra-Site%2fzone": {"a", "b"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("setUserHeaders = %v, want %v", h, want)
	}
}

func TestGroupVersionOf(t *testing.T) {
	tests := []struct {
		path, group, version string
		ok                   bool
	}{
		{"/apis/metrics.k8s.io/v1beta1", "metrics.k8s.io", "v1beta1", true},
		{"/apis/metrics.k8s.io/v1beta1/namespaces/x/pods", "metrics.k8s.io", "v1beta1", true},
		{"/apis/metrics.k8s.io", "", "", false},
		{"/apis/metrics.k8s.io/", "", "", false},
		{"/apis", "", "", false},
		{"/api/v1", "", "", false},
		{"/apis//v1", "", "", false},
	}
	for _, tt := range tests {
		g, v, ok := groupVersionOf(tt.path)
		if g != tt.group || v != tt.version || ok != tt.ok {
			t.Errorf("groupVersionOf(%q) = %q, %q, %v; want %q, %q, %v", tt.path, g, v, ok, tt.group, tt.version, tt.ok)
		}
	}
}

// FuzzGroupVersionOf: any request path parses without panicking, and a
// group version found names the APIService the path is routed to.
func FuzzGroupVersionOf(f *testing.F) {
	for _, p := range []string{"/apis/metrics.k8s.io/v1beta1/nodes", "/apis/", "/apis//", "/apis/a/b/c/d", "", "/apis/%2F/v1"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		g, v, ok := groupVersionOf(path)
		if ok && (g == "" || v == "" || strings.Contains(g, "/") || strings.Contains(v, "/") || !strings.HasPrefix(path, "/apis/"+g+"/"+v)) {
			t.Errorf("groupVersionOf(%q) = %q, %q", path, g, v)
		}
	})
}

func TestLocalAPIService(t *testing.T) {
	s := LocalAPIService(schema.GroupVersion{Version: "v1"}, Priority{18000, 1}, ManagedOnStart)
	want := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1.", Labels: map[string]string{ManagedLabel: ManagedOnStart}},
		Spec:       apiregistrationv1.APIServiceSpec{Version: "v1", GroupPriorityMinimum: 18000, VersionPriority: 1},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("LocalAPIService(v1) = %+v, want %+v", s, want)
	}
}
