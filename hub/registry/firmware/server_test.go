package firmware

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

var (
	releasesGVR = firmwarev1.SchemeGroupVersion.WithResource("releases")
	rolloutsGVR = firmwarev1.SchemeGroupVersion.WithResource("rollouts")
)

// testServer is a real apiserver.Server over a real store serving the
// firmware CRDs' custom resources, until its test ends.
type testServer struct {
	config  *rest.Config
	dynamic dynamic.Interface
}

// serve starts a server of firmware.CRDs' resources, as the hub serves
// them once installed.
func serve(t *testing.T) *testServer {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var resources []apiserver.Resource
	for _, crd := range CRDs() {
		rs, err := apiextensions.CustomResources(crd, nil)
		if err != nil {
			t.Fatal(err)
		}
		resources = append(resources, rs...)
	}
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: resources})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	cfg := &rest.Config{Host: hs.URL, QPS: -1}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{config: cfg, dynamic: dc}
}

// ctx returns a context for one test's requests.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// toUnstructured converts a typed object for the dynamic client.
func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// fromUnstructured converts u into the typed out.
func fromUnstructured(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatal(err)
	}
}

// rolloutObject returns a Rollout named name with spec given as JSON.
func rolloutObject(t *testing.T, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(spec), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": firmwarev1.SchemeGroupVersion.String(), "kind": "Rollout",
		"metadata": map[string]any{"name": name}, "spec": m,
	}}
}

// TestRolloutDefaults checks that a Rollout naming only its release gets
// the schema's defaults, and that they convert to a valid planner Spec.
func TestRolloutDefaults(t *testing.T) {
	s := serve(t)
	u, err := s.dynamic.Resource(rolloutsGVR).Create(ctx(t), rolloutObject(t, "r", `{"release":"rel-1"}`), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ro firmwarev1.Rollout
	fromUnstructured(t, u, &ro)
	if !slices.Equal(ro.Spec.Waves, []string{"100%"}) || ro.Spec.HealthWindow == nil ||
		ro.Spec.HealthWindow.Duration != 5*time.Minute || ro.Spec.OnFailure != firmwarev1.FailurePause {
		t.Fatalf("defaults not applied: %+v", ro.Spec)
	}
	if _, err := ro.Spec.PlannerSpec("1.4.0"); err != nil {
		t.Fatalf("PlannerSpec of the defaulted spec: %v", err)
	}
}

// TestRolloutInvalid checks that the served schema refuses bad Rollouts
// with 422 Invalid and the field at fault.
func TestRolloutInvalid(t *testing.T) {
	s := serve(t)
	tests := []struct {
		name, spec, field string
	}{
		{"missing release", `{"waves":["1"]}`, "spec.release"},
		{"zero percent", `{"release":"r","waves":["0%"]}`, "spec.waves[0]"},
		{"over 100 percent", `{"release":"r","waves":["150%"]}`, "spec.waves[0]"},
		{"zero count", `{"release":"r","waves":["0"]}`, "spec.waves[0]"},
		{"two targets in one", `{"release":"r","waves":["1,5%"]}`, "spec.waves[0]"},
		{"no waves", `{"release":"r","waves":[]}`, "spec.waves"},
		{"wave after 100%", `{"release":"r","waves":["100%","5"]}`, "spec.waves"},
		{"repeated wave", `{"release":"r","waves":["5","5%","5"]}`, "spec.waves"},
		{"falling counts", `{"release":"r","waves":["10","5%","9"]}`, "spec.waves"},
		{"falling percentages", `{"release":"r","waves":["50%","1","10%"]}`, "spec.waves"},
		{"bad health window", `{"release":"r","healthWindow":"soon"}`, "spec.healthWindow"},
		{"budget over 100%", `{"release":"r","failureBudget":{"percent":101}}`, "spec.failureBudget.percent"},
		{"negative budget", `{"release":"r","failureBudget":{"count":-1}}`, "spec.failureBudget.count"},
		{"sample alone", `{"release":"r","failureBudget":{"minSample":5}}`, "spec.failureBudget"},
		{"bad action", `{"release":"r","onFailure":"Explode"}`, "spec.onFailure"},
		{"bad hour", `{"release":"r","maintenanceWindows":[{"start":"25:00","end":"04:00"}]}`, "spec.maintenanceWindows[0].start"},
		{"bad minute", `{"release":"r","maintenanceWindows":[{"start":"22:00","end":"04:60"}]}`, "spec.maintenanceWindows[0].end"},
		{"empty window", `{"release":"r","maintenanceWindows":[{"start":"22:00","end":"22:00"}]}`, "spec.maintenanceWindows[0]"},
		{"bad day", `{"release":"r","maintenanceWindows":[{"days":["Funday"],"start":"22:00","end":"04:00"}]}`, "spec.maintenanceWindows[0].days[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.dynamic.Resource(rolloutsGVR).Create(ctx(t), rolloutObject(t, "bad", tt.spec), metav1.CreateOptions{})
			wantInvalid(t, err, tt.field)
		})
	}
}

// wantInvalid checks that err is 422 Invalid with a cause at field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error %v, want Invalid", err)
	}
	var fields []string
	if st, ok := err.(apierrors.APIStatus); ok && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			fields = append(fields, c.Field)
		}
	}
	if !slices.Contains(fields, field) {
		t.Fatalf("causes at %v, want one at %s (%v)", fields, field, err)
	}
}

// TestRolloutReleaseImmutable checks that spec.release cannot change
// while the rest of the spec can, by a merge patch as kubectl sends.
func TestRolloutReleaseImmutable(t *testing.T) {
	s := serve(t)
	c := s.dynamic.Resource(rolloutsGVR)
	u, err := c.Create(ctx(t), rolloutObject(t, "r", `{"release":"rel-1"}`), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As `kubectl patch rollout r --type=merge -p ...` pauses it.
	if u, err = c.Patch(ctx(t), "r", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("pausing: %v", err)
	}
	if paused, _, _ := unstructured.NestedBool(u.Object, "spec", "paused"); !paused || u.GetGeneration() != 2 {
		t.Fatalf("after the patch paused=%v generation=%d, want true 2", paused, u.GetGeneration())
	}
	if err := unstructured.SetNestedField(u.Object, "rel-2", "spec", "release"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Update(ctx(t), u, metav1.UpdateOptions{})
	wantInvalid(t, err, "spec.release")
	if !strings.Contains(err.Error(), "release is immutable") {
		t.Fatalf("error %v, want the rule's message", err)
	}
}

// TestRoundTripServed creates a fully populated Release and Rollout,
// writes their status through the status subresource and reads back
// exactly what was written.
func TestRoundTripServed(t *testing.T) {
	s := serve(t)
	tests := []struct {
		name  string
		gvr   schema.GroupVersionResource
		obj   runtime.Object
		empty func() runtime.Object
	}{
		{"release", releasesGVR, fullRelease(), func() runtime.Object { return &firmwarev1.Release{} }},
		{"rollout", rolloutsGVR, fullRollout(), func() runtime.Object { return &firmwarev1.Rollout{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := s.dynamic.Resource(tt.gvr)
			in := toUnstructured(t, tt.obj)
			created, err := c.Create(ctx(t), in, metav1.CreateOptions{FieldValidation: "Strict"})
			if err != nil {
				t.Fatal(err)
			}
			in.SetResourceVersion(created.GetResourceVersion())
			got, err := c.UpdateStatus(ctx(t), in, metav1.UpdateOptions{FieldValidation: "Strict"})
			if err != nil {
				t.Fatal(err)
			}
			out := tt.empty()
			fromUnstructured(t, got, out)
			wantSpecStatus(t, out, tt.obj)
		})
	}
}

// wantSpecStatus checks that got's spec and status equal want's.
func wantSpecStatus(t *testing.T, got, want runtime.Object) {
	t.Helper()
	switch w := want.(type) {
	case *firmwarev1.Release:
		g := got.(*firmwarev1.Release)
		if !equality.Semantic.DeepEqual(g.Spec, w.Spec) || !equality.Semantic.DeepEqual(g.Status, w.Status) {
			t.Fatalf("read back\n%+v\n%+v\nwant\n%+v\n%+v", g.Spec, g.Status, w.Spec, w.Status)
		}
	case *firmwarev1.Rollout:
		g := got.(*firmwarev1.Rollout)
		if !equality.Semantic.DeepEqual(g.Spec, w.Spec) || !equality.Semantic.DeepEqual(g.Status, w.Status) {
			t.Fatalf("read back\n%+v\n%+v\nwant\n%+v\n%+v", g.Spec, g.Status, w.Spec, w.Status)
		}
	}
}

// TestReleaseInvalid checks the Release schema's refusals.
func TestReleaseInvalid(t *testing.T) {
	s := serve(t)
	tests := []struct {
		name  string
		edit  func(*firmwarev1.Release)
		raw   func(*unstructured.Unstructured)
		field string
	}{
		{name: "no version", edit: func(r *firmwarev1.Release) { r.Spec.Version = "" }, field: "spec.version"},
		{name: "no envelope", edit: func(r *firmwarev1.Release) { r.Spec.Envelope = nil }, field: "spec.envelope"},
		{name: "bad kind", edit: func(r *firmwarev1.Release) { r.Spec.Components[0].Kind = "kernel" }, field: "spec.components[0].kind"},
		{name: "bad digest", edit: func(r *firmwarev1.Release) { r.Spec.Components[0].SHA256 = "XYZ" }, field: "spec.components[0].sha256"},
		{name: "envelope not base64", raw: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "not base64!", "spec", "envelope")
		}, field: "spec.envelope"},
		{name: "envelope over 1 MiB", edit: func(r *firmwarev1.Release) {
			r.Spec.Envelope = make([]byte, manifest.MaxEnvelopeBytes+1)
		}, field: "spec.envelope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fullRelease()
			r.Status = firmwarev1.ReleaseStatus{}
			if tt.edit != nil {
				tt.edit(r)
			}
			u := toUnstructured(t, r)
			if tt.raw != nil {
				tt.raw(u)
			}
			_, err := s.dynamic.Resource(releasesGVR).Create(ctx(t), u, metav1.CreateOptions{})
			wantInvalid(t, err, tt.field)
		})
	}
}

// TestTables checks the printer columns as kubectl get asks for them.
func TestTables(t *testing.T) {
	s := serve(t)
	ro, rel := fullRollout(), fullRelease()
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj runtime.Object
	}{{rolloutsGVR, ro}, {releasesGVR, rel}} {
		c := s.dynamic.Resource(o.gvr)
		u := toUnstructured(t, o.obj)
		created, err := c.Create(ctx(t), u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.SetResourceVersion(created.GetResourceVersion())
		if _, err := c.UpdateStatus(ctx(t), u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		resource string
		columns  []string
		cells    []any
	}{
		{"rollouts", []string{"Name", "Release", "Wave", "Updated", "Failed", "Pending", "Paused", "Age"},
			[]any{"agent-1-4-0", "agent-1-4-0", 1.0, 1.0, 1.0, 1.0, true}},
		{"releases", []string{"Name", "Version", "Verified", "Age"},
			[]any{"agent-1-4-0", "1.4.0", "True"}},
	}
	for _, tt := range tests {
		t.Run(tt.resource, func(t *testing.T) {
			table := getTable(t, s, tt.resource)
			var names []string
			for _, c := range table.ColumnDefinitions {
				names = append(names, c.Name)
			}
			if !slices.Equal(names, tt.columns) {
				t.Fatalf("columns %v, want %v", names, tt.columns)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("%d rows, want 1", len(table.Rows))
			}
			cells := table.Rows[0].Cells
			if len(cells) != len(tt.columns) || !equality.Semantic.DeepEqual(cells[:len(tt.cells)], tt.cells) {
				t.Fatalf("cells %#v, want %#v then Age", cells, tt.cells)
			}
		})
	}
}

// getTable lists resource as a meta.k8s.io/v1 Table, as kubectl get does.
func getTable(t *testing.T, s *testServer, resource string) *metav1.Table {
	t.Helper()
	cfg := rest.CopyConfig(s.config)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, cfg.Host+"/apis/firmware.outpost.dev/v1/"+resource, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %s", resp.Status)
	}
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		t.Fatal(err)
	}
	if table.Kind != "Table" {
		t.Fatalf("kind %q, want Table", table.Kind)
	}
	return &table
}

// TestRolloutValidWaves checks that the schema's wave rules accept what
// the planner accepts, counts and percentages interleaved.
func TestRolloutValidWaves(t *testing.T) {
	s := serve(t)
	tests := [][]string{
		{"100%"},
		{"3"},
		{"1", "5%", "25%", "100%"},
		{"1", "2", "10", "50%"},
		{"5%", "10", "20%", "999999999"},
	}
	for i, waves := range tests {
		t.Run(strings.Join(waves, ","), func(t *testing.T) {
			data, err := json.Marshal(map[string]any{"release": "r", "waves": waves})
			if err != nil {
				t.Fatal(err)
			}
			u, err := s.dynamic.Resource(rolloutsGVR).Create(ctx(t), rolloutObject(t, fmt.Sprintf("r%d", i), string(data)), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var ro firmwarev1.Rollout
			fromUnstructured(t, u, &ro)
			if _, err := ro.Spec.PlannerSpec("1.0.0"); err != nil {
				t.Fatalf("served, but PlannerSpec refuses: %v", err)
			}
		})
	}
}

// TestReleaseLargestEnvelope checks that an envelope of exactly
// manifest.MaxEnvelopeBytes is accepted, one byte more being refused by
// TestReleaseInvalid.
func TestReleaseLargestEnvelope(t *testing.T) {
	s := serve(t)
	r := fullRelease()
	r.Status = firmwarev1.ReleaseStatus{}
	r.Spec.Envelope = make([]byte, manifest.MaxEnvelopeBytes)
	got, err := s.dynamic.Resource(releasesGVR).Create(ctx(t), toUnstructured(t, r), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var back firmwarev1.Release
	fromUnstructured(t, got, &back)
	if len(back.Spec.Envelope) != manifest.MaxEnvelopeBytes {
		t.Fatalf("envelope of %d bytes, want %d", len(back.Spec.Envelope), manifest.MaxEnvelopeBytes)
	}
}
