package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// applyClock is the server clock of the field-management tests, far
// from the wall clock so that a time taken from the wall clock shows;
// in the past, so that the library's own times stay the newest.
var applyClock = time.Date(2001, 5, 6, 7, 8, 9, 0, time.UTC)

func startApplyServer(t *testing.T) *testHub {
	t.Helper()
	h := startTestServer(t, func(c *Config) {
		c.Resources = append(podResources(), widgetResource())
		c.Now = func() time.Time { return applyClock }
	})
	if _, err := h.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return h
}

// clientAs returns a client of h that says it is userAgent.
func clientAs(t *testing.T, h *testHub, userAgent string) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: h.url, QPS: -1, UserAgent: userAgent})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// do sends a request to h and returns the status code and body.
func (h *testHub) do(t *testing.T, method, path, contentType, body string) (int, string) {
	t.Helper()
	return doRequest(t, h.url, method, path, contentType, body)
}

const applyType = "application/apply-patch+yaml"

// managers returns obj's managedFields as "manager/operation[/subresource]"
// strings mapped to their fields.
func managers(t *testing.T, entries []metav1.ManagedFieldsEntry) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range entries {
		k := e.Manager + "/" + string(e.Operation)
		if e.Subresource != "" {
			k += "/" + e.Subresource
		}
		if e.FieldsType != "FieldsV1" || e.FieldsV1 == nil {
			t.Fatalf("entry %s has fields of type %q", k, e.FieldsType)
		}
		if e.Time == nil || !e.Time.Time.Equal(applyClock) {
			t.Errorf("entry %s has time %v, want the server clock's %v", k, e.Time, applyClock)
		}
		out[k] = string(e.FieldsV1.Raw)
	}
	return out
}

// TestManagedFieldsOfWrites: creates, updates and patches record their
// manager, named by fieldManager or taken from the User-Agent, with the
// fields they set, at the server's time; the managedFields a client
// sends are kept when valid, cleared by [{}], ignored when invalid.
func TestManagedFieldsOfWrites(t *testing.T) {
	h := startApplyServer(t)
	ctx := context.Background()
	cms := h.client.CoreV1().ConfigMaps("ns1")
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"app": "x"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{FieldManager: "creator"})
	if err != nil {
		t.Fatal(err)
	}
	got := managers(t, cm.ManagedFields)
	if want := `{"f:data":{".":{},"f:k":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`; len(got) != 1 || got["creator/Update"] != want {
		t.Fatalf("create: managedFields %v, want creator/Update: %s", got, want)
	}
	if cm.ManagedFields[0].APIVersion != "v1" {
		t.Errorf("create: apiVersion %q, want v1", cm.ManagedFields[0].APIVersion)
	}

	// An update without fieldManager is the User-Agent's, up to its "/".
	edit := clientAs(t, h, "kubectl-edit/v1.33.0 (linux/amd64) kubernetes/abcdef").CoreV1().ConfigMaps("ns1")
	cm.Data["k2"] = "v2"
	cm, err = edit.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got = managers(t, cm.ManagedFields)
	if got["kubectl-edit/Update"] != `{"f:data":{"f:k2":{}}}` || len(got) != 2 {
		t.Fatalf("update: managedFields %v, want creator's and kubectl-edit's f:k2", got)
	}

	// An update that changes nothing writes nothing.
	rv := cm.ResourceVersion
	if cm, err = edit.Update(ctx, cm, metav1.UpdateOptions{}); err != nil || cm.ResourceVersion != rv {
		t.Fatalf("no-op update: rv %s (was %s), %v", cm.ResourceVersion, rv, err)
	}

	// A patch records its manager too.
	cm, err = cms.Patch(ctx, "a", types.MergePatchType, []byte(`{"data":{"k3":"v3"}}`), metav1.PatchOptions{FieldManager: "patcher"})
	if err != nil {
		t.Fatal(err)
	}
	if got = managers(t, cm.ManagedFields); got["patcher/Update"] != `{"f:data":{"f:k3":{}}}` {
		t.Fatalf("patch: managedFields %v", got)
	}

	// Invalid managedFields from a client are ignored: the stored ones stay.
	before := managers(t, cm.ManagedFields)
	cm.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "liar", Operation: "Bogus", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}}
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "creator"}); err != nil {
		t.Fatal(err)
	}
	if got = managers(t, cm.ManagedFields); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("invalid managedFields sent: managedFields %v, want %v", got, before)
	}
	// [{}] clears them ([] too, but client-go leaves an empty list out).
	cm.ManagedFields = []metav1.ManagedFieldsEntry{{}}
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "creator"}); err != nil {
		t.Fatal(err)
	}
	if len(cm.ManagedFields) != 0 {
		t.Fatalf("[{}] sent: managedFields %v, want none", managers(t, cm.ManagedFields))
	}

	// A fieldManager that is not printable is upstream's 422.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{FieldManager: "a\x01b"}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "fieldManager") {
		t.Fatalf("create with a bad fieldManager = %v, want 422 about fieldManager", err)
	}
	// Status updates record the status subresource. (An object without
	// managedFields, as ns1, is not tracked by updates, as upstream.)
	ns, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns2", Labels: map[string]string{"a": "b"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Status.Phase = corev1.NamespaceActive
	if ns, err = h.client.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{FieldManager: "nsc"}); err != nil {
		t.Fatal(err)
	}
	if got = managers(t, ns.ManagedFields); got["nsc/Update/status"] != `{"f:status":{"f:phase":{}}}` {
		t.Fatalf("status update: managedFields %v", got)
	}
}

// TestApply: server-side apply creates, merges, conflicts, forces,
// removes what its manager no longer applies, merges lists by their keys,
// and works through client-go's typed Apply.
func TestApply(t *testing.T) {
	h := startApplyServer(t)
	ctx := context.Background()
	const cmPath = "/api/v1/namespaces/ns1/configmaps/c"
	apply := func(manager, query, body string) (int, string) {
		t.Helper()
		return h.do(t, "PATCH", cmPath+"?fieldManager="+manager+query, applyType, body)
	}
	get := func() *corev1.ConfigMap {
		t.Helper()
		cm, err := h.client.CoreV1().ConfigMaps("ns1").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}

	// Apply creates, in YAML.
	if code, body := apply("a", "", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  x: \"1\"\n  w: \"2\"\n"); code != http.StatusCreated {
		t.Fatalf("apply to create = %d %s", code, body)
	}
	cm := get()
	if got := managers(t, cm.ManagedFields); len(got) != 1 || got["a/Apply"] != `{"f:data":{"f:w":{},"f:x":{}}}` {
		t.Fatalf("after create: managedFields %v", got)
	}
	if cm.UID == "" || cm.Data["x"] != "1" {
		t.Fatalf("created %+v", cm)
	}

	// Re-applying the same configuration writes nothing.
	if code, body := apply("a", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"x":"1","w":"2"}}`); code != 200 {
		t.Fatalf("re-apply = %d %s", code, body)
	}
	if again := get(); again.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("re-apply of the same configuration: resourceVersion %s, was %s", again.ResourceVersion, cm.ResourceVersion)
	}

	// Another manager's apply of a's field conflicts, naming a and the field.
	code, body := apply("b", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"x":"other"}}`)
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict {
		t.Fatalf("conflicting apply = %d %s, want 409 Conflict", code, body)
	}
	if want := `Apply failed with 1 conflict: conflict with "a": .data.x`; st.Message != want {
		t.Errorf("conflict message %q, want %q", st.Message, want)
	}
	if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict || st.Details.Causes[0].Field != ".data.x" {
		t.Errorf("conflict details %+v", st.Details)
	}
	// force=true takes the field.
	if code, body := apply("b", "&force=true", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"x":"other"}}`); code != 200 {
		t.Fatalf("forced apply = %d %s", code, body)
	}
	cm = get()
	if got := managers(t, cm.ManagedFields); got["a/Apply"] != `{"f:data":{"f:w":{}}}` || got["b/Apply"] != `{"f:data":{"f:x":{}}}` || cm.Data["x"] != "other" {
		t.Fatalf("after forced apply: %v, managedFields %v", cm.Data, got)
	}
	// An apply without a field its manager owned alone removes it.
	// (Keys such as y are booleans in YAML 1.1, as upstream reads it.)
	if code, body := apply("a", "", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"z":"3"}}`); code != 200 {
		t.Fatalf("apply dropping w = %d %s", code, body)
	}
	if cm = get(); fmt.Sprint(cm.Data) != "map[x:other z:3]" {
		t.Fatalf("after a dropped w: data %v, want x and z", cm.Data)
	}

	// client-go's typed Apply.
	typed, err := h.client.CoreV1().ConfigMaps("ns1").Apply(ctx, corev1ac.ConfigMap("typed", "ns1").WithLabels(map[string]string{"l": "1"}).WithData(map[string]string{"k": "v"}), metav1.ApplyOptions{FieldManager: "typed-applier"})
	if err != nil {
		t.Fatal(err)
	}
	if got := managers(t, typed.ManagedFields); got["typed-applier/Apply"] != `{"f:data":{"f:k":{}},"f:metadata":{"f:labels":{"f:l":{}}}}` {
		t.Fatalf("typed apply: managedFields %v", got)
	}
	if _, err := h.client.CoreV1().ConfigMaps("ns1").Apply(ctx, corev1ac.ConfigMap("typed", "ns1").WithData(map[string]string{"k": "w"}), metav1.ApplyOptions{FieldManager: "other"}); !apierrors.IsConflict(err) {
		t.Fatalf("typed apply of another's field = %v, want a conflict", err)
	}
	if typed, err = h.client.CoreV1().ConfigMaps("ns1").Apply(ctx, corev1ac.ConfigMap("typed", "ns1").WithData(map[string]string{"k": "w"}), metav1.ApplyOptions{FieldManager: "other", Force: true}); err != nil || typed.Data["k"] != "w" {
		t.Fatalf("forced typed apply = %v, %v", typed, err)
	}
	// Dry run changes nothing.
	if _, err := h.client.CoreV1().ConfigMaps("ns1").Apply(ctx, corev1ac.ConfigMap("dry", "ns1"), metav1.ApplyOptions{FieldManager: "x", DryRun: []string{"All"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().ConfigMaps("ns1").Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after a dry-run apply = %v, want NotFound", err)
	}
}

// TestApplyStatus: an apply to the status subresource changes status
// and metadata (as upstream's namespace status strategy, which resets the
// spec alone), recorded with the subresource; it does not create.
func TestApplyStatus(t *testing.T) {
	h := startApplyServer(t)
	body := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1","labels":{"applied":"x"}},"spec":{"finalizers":["example.com/f"]},"status":{"phase":"Active"}}`
	if code, resp := h.do(t, "PATCH", "/api/v1/namespaces/ns1/status?fieldManager=st", applyType, body); code != 200 {
		t.Fatalf("status apply = %d %s", code, resp)
	}
	ns, err := h.client.CoreV1().Namespaces().Get(context.Background(), "ns1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Phase != corev1.NamespaceActive || len(ns.Spec.Finalizers) != 0 || ns.Labels["applied"] != "x" {
		t.Fatalf("after a status apply: %+v, want the phase and the label, not the spec", ns)
	}
	if got := managers(t, ns.ManagedFields); len(got) != 1 || got["st/Apply/status"] != `{"f:metadata":{"f:labels":{"f:applied":{}}},"f:status":{"f:phase":{}}}` {
		t.Fatalf("after a status apply: managedFields %v, want st's apply of the label and status.phase", got)
	}
	if code, resp := h.do(t, "PATCH", "/api/v1/namespaces/nope/status?fieldManager=st", applyType, strings.ReplaceAll(body, `"ns1"`, `"nope"`)); code != 404 {
		t.Fatalf("status apply of a missing namespace = %d %s, want 404", code, resp)
	}
}

// TestApplyListMap: containers merge by name, each manager owning its
// own; changing another's container conflicts.
func TestApplyListMap(t *testing.T) {
	h := startApplyServer(t)
	ctx := context.Background()
	pods := h.client.CoreV1().Pods("ns1")
	pod := func(containers ...*corev1ac.ContainerApplyConfiguration) *corev1ac.PodApplyConfiguration {
		return corev1ac.Pod("p", "ns1").WithSpec(corev1ac.PodSpec().WithContainers(containers...))
	}
	if _, err := pods.Apply(ctx, pod(corev1ac.Container().WithName("app").WithImage("app:1")), metav1.ApplyOptions{FieldManager: "a"}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.Apply(ctx, pod(corev1ac.Container().WithName("sidecar").WithImage("side:1")), metav1.ApplyOptions{FieldManager: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name+"="+c.Image)
	}
	if fmt.Sprint(names) != "[app=app:1 sidecar=side:1]" {
		t.Fatalf("containers %v, want app and sidecar", names)
	}
	got := managers(t, p.ManagedFields)
	if !strings.Contains(got["b/Apply"], `"k:{\"name\":\"sidecar\"}"`) || strings.Contains(got["b/Apply"], "app") {
		t.Fatalf("b's fields %s, want the sidecar container only", got["b/Apply"])
	}
	_, err = pods.Apply(ctx, pod(corev1ac.Container().WithName("app").WithImage("app:2")), metav1.ApplyOptions{FieldManager: "b"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "a": .spec.containers[name="app"].image`) {
		t.Fatalf("b's apply of a's container = %v, want a conflict on its image", err)
	}
	// Duplicate keys in an applied list are refused.
	if _, err := pods.Apply(ctx, pod(corev1ac.Container().WithName("d").WithImage("x"), corev1ac.Container().WithName("d").WithImage("y")), metav1.ApplyOptions{FieldManager: "c"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("apply with duplicate containers = %v, want 400", err)
	}
}

// TestApplyUpgradesClientSideApply: an object made by client-side apply
// (its last-applied-configuration annotation and the
// kubectl-client-side-apply manager) can be applied server-side with a
// changed configuration without a conflict, the applier taking the
// fields, as upstream upgrades kubectl apply to kubectl apply
// --server-side.
func TestApplyUpgradesClientSideApply(t *testing.T) {
	h := startApplyServer(t)
	ctx := context.Background()
	last := `{"apiVersion":"v1","data":{"a":"1","b":"2"},"kind":"ConfigMap","metadata":{"annotations":{},"name":"csa","namespace":"ns1"}}`
	csa := clientAs(t, h, "kubectl-client-side-apply/v1.27.0 (linux/amd64) kubernetes/abc").CoreV1().ConfigMaps("ns1")
	if _, err := csa.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "csa", Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: last}}, Data: map[string]string{"a": "1", "b": "2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := h.client.CoreV1().ConfigMaps("ns1").Apply(ctx, corev1ac.ConfigMap("csa", "ns1").WithData(map[string]string{"a": "changed", "b": "2"}), metav1.ApplyOptions{FieldManager: "kubectl"})
	if err != nil {
		t.Fatalf("server-side apply over client-side apply: %v", err)
	}
	got := managers(t, cm.ManagedFields)
	if cm.Data["a"] != "changed" || !strings.Contains(got["kubectl/Apply"], `"f:a"`) || !strings.Contains(got["kubectl/Apply"], `"f:b"`) {
		t.Fatalf("after the upgrade: data %v, managedFields %v", cm.Data, got)
	}
	if strings.Contains(got["kubectl-client-side-apply/Update"], `"f:a"`) {
		t.Errorf("kubectl-client-side-apply still owns data.a: %v", got)
	}
}

// TestApplyBadInput: an apply that is not YAML, not an object, not of
// the resource or not of its schema, or without a manager, gets
// upstream's 4xx with a message saying why; the server keeps serving.
func TestApplyBadInput(t *testing.T) {
	h := startApplyServer(t)
	const path = "/api/v1/namespaces/ns1/configmaps/c?fieldManager=m"
	ok := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"}}`
	bomb := "a: &a \"" + strings.Repeat("x", 1<<20) + "\"\nb: [" + strings.Repeat("*a,", 500) + "*a]\n"
	for _, tc := range []struct {
		name, path, body string
		code             int
		msg              string
	}{
		{"not yaml", path, "{{{", 400, "error decoding patch"},
		{"a list", path, "[1, 2]", 400, "error decoding patch"},
		{"no kind", path, `{"metadata":{"name":"c"}}`, 400, "invalid object type"},
		{"other version", path, `{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"c"}}`, 400, "Incorrect version specified in apply patch"},
		{"other kind", path, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c"}}`, 400, "invalid object type"},
		{"unknown field", path, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"spec":{"x":1}}`, 400, ".spec: field not declared in schema"},
		{"wrong type", path, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":[1]}`, 400, "does not fit the schema"},
		{"managedFields", path, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","managedFields":[{"manager":"x"}]}}`, 400, "metadata.managedFields must be nil"},
		{"other name", path, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"}}`, 400, "does not match the name on the URL"},
		{"other namespace", path, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns2"}}`, 400, "does not match the namespace"},
		{"no manager", "/api/v1/namespaces/ns1/configmaps/c", ok, 422, "fieldManager: Required value"},
		{"bad force", path + "&force=maybe", ok, 400, "force"},
		{"duplicate key, strict", path + "&fieldValidation=Strict", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: a\n  k: b\n", 400, "error strict decoding patch"},
		{"alias bomb", path, bomb, 413, "aliases"},
	} {
		code, body := h.do(t, "PATCH", tc.path, applyType, tc.body)
		var st metav1.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil || code != tc.code || int(st.Code) != tc.code || !strings.Contains(st.Message, tc.msg) {
			t.Errorf("%s: %d %.300s, want %d with %q", tc.name, code, body, tc.code, tc.msg)
		}
	}
	if code, body := h.do(t, "PATCH", path, applyType, ok); code != http.StatusCreated {
		t.Fatalf("good apply after bad ones = %d %s", code, body)
	}
	// force belongs to apply only.
	if code, body := h.do(t, "PATCH", path+"&force=true", "application/merge-patch+json", `{}`); code != 422 || !strings.Contains(body, "may not be specified for non-apply patch") {
		t.Errorf("merge patch with force = %d %s, want 422", code, body)
	}
}

// TestApplyUnstructured: a resource without Go types (a custom resource
// without a schema) is applied with a deduced schema: its fields merge
// by manager as well.
func TestApplyUnstructured(t *testing.T) {
	h := startApplyServer(t)
	const path = "/apis/example.outpost.dev/v1/namespaces/ns1/widgets/w"
	if code, body := h.do(t, "PATCH", path+"?fieldManager=a", applyType, "apiVersion: example.outpost.dev/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 3\n"); code != 201 {
		t.Fatalf("apply to create a widget = %d %s", code, body)
	}
	if code, body := h.do(t, "PATCH", path+"?fieldManager=b", applyType, `{"apiVersion":"example.outpost.dev/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":4}}`); code != 409 || !strings.Contains(body, `conflict with \"a\": .spec.size`) {
		t.Fatalf("conflicting widget apply = %d %s", code, body)
	}
	code, body := h.do(t, "PATCH", path+"?fieldManager=b", applyType, `{"apiVersion":"example.outpost.dev/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"color":"red"}}`)
	if code != 200 || !strings.Contains(body, `"size":3`) || !strings.Contains(body, `"color":"red"`) || !strings.Contains(body, `"manager":"b","operation":"Apply"`) {
		t.Fatalf("second widget apply = %d %s", code, body)
	}
}

// TestApplyBounds: the hub allocates a bounded multiple of what an
// apply sends, whether its YAML repeats aliases of a long value or it
// is a large configuration of many fields, merged with another
// manager's.
func TestApplyBounds(t *testing.T) {
	h := startApplyServer(t)
	const path = "/api/v1/namespaces/ns1/configmaps/big?fieldManager="
	var data []string
	for i := range 5000 {
		data = append(data, fmt.Sprintf(`"k%d":"%s"`, i, strings.Repeat("v", 100)))
	}
	big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{` + strings.Join(data, ",") + `}}`
	bomb := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n  annotations:\n    a: &a \"" + strings.Repeat("x", 1<<20) + "\"\n" +
		"data: {" + repeat("b: *a", 1) + "}\nbinaryData: [" + repeat("*a", 200_000) + "]\n"
	for _, tc := range []struct {
		name, manager, body string
		code                int
	}{
		{"large", "a", big, 201},
		{"large again, another manager", "b", big, 200},
		{"alias bomb", "c", bomb, 413},
	} {
		var code int
		var body string
		n := allocated(func() { code, body = h.do(t, "PATCH", path+tc.manager, applyType, tc.body) })
		if code != tc.code {
			t.Fatalf("%s: %d %.300s, want %d", tc.name, code, body, tc.code)
		}
		// Upstream's merge turns a configuration into several forms
		// (unstructured, typed values, field sets, Go types): some 50 to
		// 70 times its size in allocations, in proportion to it.
		if limit := uint64(100 * len(tc.body)); n > limit {
			t.Errorf("%s: allocated %d bytes for a body of %d, more than %d", tc.name, n, len(tc.body), limit)
		}
		t.Logf("%s: allocated %d bytes for a body of %d (%.1fx)", tc.name, n, len(tc.body), float64(n)/float64(len(tc.body)))
	}
}
