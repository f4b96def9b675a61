package core

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

// TestResources checks names, scope and subresources against what
// `kubectl api-resources` and discovery show upstream.
func TestResources(t *testing.T) {
	type info struct {
		kind, singular, short, categories string
		namespaced, status, graceful      bool
		createOnUpdate                    bool
	}
	wantByPlural := map[string]info{
		"configmaps":             {"ConfigMap", "configmap", "cm", "", true, false, false, false},
		"endpoints":              {"Endpoints", "endpoints", "ep", "", true, false, false, true},
		"events":                 {"Event", "event", "ev", "", true, false, false, true},
		"limitranges":            {"LimitRange", "limitrange", "limits", "", true, false, false, true},
		"namespaces":             {"Namespace", "namespace", "ns", "", false, true, false, false},
		"nodes":                  {"Node", "node", "no", "", false, true, false, false},
		"persistentvolumeclaims": {"PersistentVolumeClaim", "persistentvolumeclaim", "pvc", "", true, true, false, false},
		"persistentvolumes":      {"PersistentVolume", "persistentvolume", "pv", "", false, true, false, false},
		"pods":                   {"Pod", "pod", "po", "all", true, true, true, false},
		"podtemplates":           {"PodTemplate", "podtemplate", "", "", true, false, false, false},
		"replicationcontrollers": {"ReplicationController", "replicationcontroller", "rc", "all", true, true, false, false},
		"resourcequotas":         {"ResourceQuota", "resourcequota", "quota", "", true, true, false, false},
		"secrets":                {"Secret", "secret", "", "", true, false, false, false},
		"serviceaccounts":        {"ServiceAccount", "serviceaccount", "sa", "", true, false, false, false},
		"services":               {"Service", "service", "svc", "all", true, true, false, true},
	}
	res := Resources()
	if len(res) != len(wantByPlural) {
		t.Errorf("Resources() has %d resources, want %d", len(res), len(wantByPlural))
	}
	for _, r := range res {
		w, ok := wantByPlural[r.Plural]
		if !ok {
			t.Errorf("Resources() has unexpected %q", r.Plural)
			continue
		}
		_, status := r.Rules.(apiserver.StatusValidator)
		_, graceful := r.Rules.(apiserver.GracefulDeleter)
		got := info{r.Kind, r.Singular, strings.Join(r.ShortNames, ","), strings.Join(r.Categories, ","),
			r.Namespaced, r.Status, graceful, r.Rules.(typed.All).AllowCreateOnUpdate()}
		// Every resource's rules validate status updates (typed.Rules
		// does); only those with a status subresource are asked to.
		if got != w || !status || r.GroupVersion != corev1.SchemeGroupVersion || (r.Scale != nil) != (r.Plural == "replicationcontrollers") {
			t.Errorf("resource %s = %+v (status validator %v, gv %v), want %+v", r.Plural, got, status, r.GroupVersion, w)
		}
		if obj := r.New(); fmt.Sprintf("%T", obj) != "*v1."+r.Kind {
			t.Errorf("resource %s: New() = %T", r.Plural, obj)
		}
		if list := r.NewList(); fmt.Sprintf("%T", list) != "*v1."+r.Kind+"List" {
			t.Errorf("resource %s: NewList() = %T", r.Plural, list)
		}
		cols := r.Rules.(typed.All).Columns()
		for i, c := range cols {
			if c.Description == "" || c.Type == "" {
				t.Errorf("resource %s: column %q has no type or description", r.Plural, c.Name)
			}
			if i == 0 && r.Plural != "events" && (c.Name != "Name" || c.Format != "name") {
				t.Errorf("resource %s: first column = %+v, want Name with format name", r.Plural, c)
			}
		}
		// Rules never panic on a fresh object, and rows fit the columns.
		obj := r.New()
		r.Rules.(typed.All).Default(obj)
		r.Rules.(typed.All).PrepareForCreate(obj)
		if cells := r.Rules.(typed.All).Row(obj); len(cells) != len(cols) {
			t.Errorf("resource %s: Row(new) has %d cells for %d columns", r.Plural, len(cells), len(cols))
		}
		if f := r.Rules.(typed.All).Fields(obj); f == nil {
			t.Errorf("resource %s: Fields(new) = nil, want a set", r.Plural)
		}
		if errs := r.Rules.Validate(obj); len(errs) == 0 {
			t.Errorf("resource %s: Validate(new) passed an object without a name", r.Plural)
		}
	}
}

func TestColumns(t *testing.T) {
	for _, tc := range []struct {
		plural string
		want   string // names, wide ones marked with *
	}{
		{"pods", "Name Ready Status Restarts Age IP* Node* Nominated Node* Readiness Gates*"},
		{"services", "Name Type Cluster-IP External-IP Port(s) Age Selector*"},
		{"namespaces", "Name Status Age"},
		{"nodes", "Name Status Roles Age Version Internal-IP* External-IP* OS-Image* Kernel-Version* Container-Runtime*"},
		{"configmaps", "Name Data Age"},
		{"secrets", "Name Type Data Age"},
		{"serviceaccounts", "Name Secrets Age"},
		{"events", "Last Seen Type Reason Object Subobject* Source* Message First Seen* Count* Name*"},
		{"endpoints", "Name Endpoints Age"},
		{"limitranges", "Name Created At"},
		{"resourcequotas", "Name Request Limit Age"},
		{"persistentvolumes", "Name Capacity Access Modes Reclaim Policy Status Claim StorageClass VolumeAttributesClass Reason Age VolumeMode*"},
		{"persistentvolumeclaims", "Name Status Volume Capacity Access Modes StorageClass VolumeAttributesClass Age VolumeMode*"},
		{"podtemplates", "Name Containers Images Pod Labels"},
		{"replicationcontrollers", "Name Desired Current Ready Age Containers* Images* Selector*"},
	} {
		var names []string
		for _, c := range rulesFor(tc.plural).Columns() {
			if c.Priority == 1 {
				c.Name += "*"
			}
			names = append(names, c.Name)
		}
		if got := strings.Join(names, " "); got != tc.want {
			t.Errorf("%s: Columns() = %s, want %s", tc.plural, got, tc.want)
		}
	}
}

func TestFields(t *testing.T) {
	pod := &corev1.Pod{
		Spec: corev1.PodSpec{NodeName: "edge-1", RestartPolicy: corev1.RestartPolicyAlways, SchedulerName: "default-scheduler",
			ServiceAccountName: "default", HostNetwork: true},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}, NominatedNodeName: "edge-2"},
	}
	event := &corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", UID: "u1", APIVersion: "v1",
			ResourceVersion: "42", FieldPath: "spec.containers{app}"},
		Reason: "Pulled", Type: corev1.EventTypeNormal, ReportingController: "outpost.dev/edge",
	}
	for _, tc := range []struct {
		plural string
		obj    runtime.Object
		want   fields.Set
	}{
		{"pods", pod, fields.Set{"spec.nodeName": "edge-1", "spec.restartPolicy": "Always", "spec.schedulerName": "default-scheduler",
			"spec.serviceAccountName": "default", "spec.hostNetwork": "true", "status.phase": "Running", "status.podIP": "10.0.0.1",
			"status.nominatedNodeName": "edge-2"}},
		{"pods", &corev1.Pod{}, fields.Set{"spec.nodeName": "", "spec.restartPolicy": "", "spec.schedulerName": "",
			"spec.serviceAccountName": "", "spec.hostNetwork": "false", "status.phase": "", "status.podIP": "", "status.nominatedNodeName": ""}},
		{"events", event, fields.Set{"involvedObject.kind": "Pod", "involvedObject.namespace": "default", "involvedObject.name": "web",
			"involvedObject.uid": "u1", "involvedObject.apiVersion": "v1", "involvedObject.resourceVersion": "42",
			"involvedObject.fieldPath": "spec.containers{app}", "reason": "Pulled", "reportingComponent": "outpost.dev/edge",
			"source": "outpost.dev/edge", "type": "Normal"}},
		{"secrets", &corev1.Secret{Type: corev1.SecretTypeTLS}, fields.Set{"type": "kubernetes.io/tls"}},
		{"namespaces", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
			fields.Set{"status.phase": "Active", "name": "a"}},
		{"nodes", &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}, fields.Set{"spec.unschedulable": "true"}},
		{"configmaps", &corev1.ConfigMap{}, fields.Set{}},
		{"services", &corev1.Service{}, fields.Set{}},
		{"persistentvolumes", &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk-1"}}, fields.Set{"name": "disk-1"}},
		{"persistentvolumeclaims", &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"}}, fields.Set{"name": "data"}},
		{"replicationcontrollers", &corev1.ReplicationController{Status: corev1.ReplicationControllerStatus{Replicas: 3}}, fields.Set{"status.replicas": "3"}},
		{"podtemplates", &corev1.PodTemplate{}, fields.Set{}},
	} {
		if got := rulesFor(tc.plural).Fields(tc.obj); got.String() != tc.want.String() {
			t.Errorf("%s: Fields(%T) = %v, want %v", tc.plural, tc.obj, got, tc.want)
		}
	}
	event.Source.Component = "kubelet"
	if got := rulesFor("events").Fields(event)["source"]; got != "kubelet" {
		t.Errorf("events: Fields(with source component)[source] = %q, want kubelet", got)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
