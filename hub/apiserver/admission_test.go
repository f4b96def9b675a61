package apiserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// recordingAdmission records what it is asked and refuses objects
// labelled deny=yes.
type recordingAdmission struct {
	handles map[schema.GroupResource]bool

	mu     sync.Mutex
	asked  []schema.GroupResource
	calls  []AdmissionAttributes // objects copied
	ctxVal []any                 // the testCtxKey value of each call's context
}

type testCtxKey struct{}

func (r *recordingAdmission) Handles(gr schema.GroupResource) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, gr)
	return r.handles[gr]
}

func (r *recordingAdmission) Admit(ctx context.Context, a AdmissionAttributes) error {
	c := a
	c.Object = a.Object.DeepCopyObject()
	if a.OldObject != nil {
		c.OldObject = a.OldObject.DeepCopyObject()
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.ctxVal = append(r.ctxVal, ctx.Value(testCtxKey{}))
	r.mu.Unlock()
	if om(a.Object).GetLabels()["deny"] == "yes" {
		return apierrors.NewForbidden(a.Resource, a.Name, errors.New("denied by the test"))
	}
	return nil
}

// take returns the calls recorded since the last take.
func (r *recordingAdmission) take() []AdmissionAttributes {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.calls
	r.calls = nil
	return calls
}

var (
	grNamespaces = schema.GroupResource{Resource: "namespaces"}
	grConfigMaps = schema.GroupResource{Resource: "configmaps"}
)

// TestAdmission: the server asks its Admission about every create and
// update of the resources it handles, after preparing the object, and
// answers the client with its error as is.
func TestAdmission(t *testing.T) {
	adm := &recordingAdmission{handles: map[schema.GroupResource]bool{grNamespaces: true, grConfigMaps: true}}
	h := startTestServer(t, func(c *Config) { c.Admission = adm })
	ctx := context.Background()
	cs := h.client

	if len(adm.asked) != len(testResources()) {
		t.Errorf("Handles asked about %v, want each of the %d resources once", adm.asked, len(testResources()))
	}

	// one checks the single call since the last one.
	one := func(what string, op Operation, gr schema.GroupResource, sub, ns, name string, withOld bool) AdmissionAttributes {
		t.Helper()
		calls := adm.take()
		if len(calls) != 1 {
			t.Fatalf("%s: %d admission calls, want 1: %+v", what, len(calls), calls)
		}
		a := calls[0]
		if a.Operation != op || a.Resource != gr || a.Subresource != sub || a.Namespace != ns || a.Name != name || (a.OldObject != nil) != withOld {
			t.Errorf("%s: Admit(%s %v %q %s/%s, old %v), want Admit(%s %v %q %s/%s, old %v)", what,
				a.Operation, a.Resource, a.Subresource, a.Namespace, a.Name, a.OldObject != nil, op, gr, sub, ns, name, withOld)
		}
		return a
	}

	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := one("create namespace", Create, grNamespaces, "", "", "ns1", false)
	if m := om(a.Object); m.GetUID() == "" || m.GetCreationTimestamp().Time.IsZero() {
		t.Errorf("create: the object admitted lacks its system metadata: %+v", a.Object)
	}

	cm, err := cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one("create configmap", Create, grConfigMaps, "", "ns1", "a", false)

	if _, err := cs.CoreV1().Secrets("ns1").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if calls := adm.take(); len(calls) != 0 {
		t.Errorf("create of a secret, which the admission does not handle: %d calls, want none", len(calls))
	}

	cm.Data["k"] = "v2"
	if _, err := cs.CoreV1().ConfigMaps("ns1").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a = one("update", Update, grConfigMaps, "", "ns1", "a", true)
	if got, old := a.Object.(*corev1.ConfigMap), a.OldObject.(*corev1.ConfigMap); got.Data["k"] != "v2" || old.Data["k"] != "v1" || got.UID != cm.UID {
		t.Errorf("update: admitted %v replacing %v (uid %s), want v2 replacing v1 with uid %s", got.Data, old.Data, got.UID, cm.UID)
	}

	if _, err := cs.CoreV1().ConfigMaps("ns1").Patch(ctx, "a", types.MergePatchType, []byte(`{"data":{"k":"v3"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if a := one("patch", Update, grConfigMaps, "", "ns1", "a", true); a.Object.(*corev1.ConfigMap).Data["k"] != "v3" {
		t.Errorf("patch: admitted %v, want v3", a.Object.(*corev1.ConfigMap).Data)
	}

	// A status update is admitted as what will be stored: the stored
	// spec with the new status and, as upstream's namespace status
	// strategy, the metadata the request carried.
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "ns1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"through": "status"}
	ns.Status.Phase = corev1.NamespaceActive
	if _, err := cs.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a = one("update status", Update, grNamespaces, "status", "", "ns1", true)
	if got := a.Object.(*corev1.Namespace); got.Labels["through"] != "status" || got.Status.Phase != corev1.NamespaceActive {
		t.Errorf("update status: admitted labels %v phase %q, want the new label and phase Active", got.Labels, got.Status.Phase)
	}
	_, err = cs.CoreV1().Namespaces().Patch(ctx, "ns1", types.MergePatchType, []byte(`{"metadata":{"labels":{"deny":"yes"}}}`), metav1.PatchOptions{}, "status")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "denied by the test") {
		t.Errorf("patch of status with a label the admission refuses: %v, want the admission's Forbidden", err)
	}
	one("patch status", Update, grNamespaces, "status", "", "ns1", true)

	// Refusals reach the client as they are, and nothing is written.
	mustDeny := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "denied by the test") {
			t.Errorf("%s: %v, want the admission's Forbidden", what, err)
		}
	}
	denied := map[string]string{"deny": "yes"}
	_, err = cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: denied}}, metav1.CreateOptions{})
	mustDeny("create", err)
	_, err = cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: denied}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	mustDeny("dry-run create", err)
	if _, err := cs.CoreV1().ConfigMaps("ns1").Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after the refused create: %v, want NotFound", err)
	}
	cur, err := cs.CoreV1().ConfigMaps("ns1").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	upd := cur.DeepCopy()
	upd.Labels, upd.Data["k"] = denied, "refused"
	_, err = cs.CoreV1().ConfigMaps("ns1").Update(ctx, upd, metav1.UpdateOptions{})
	mustDeny("update", err)
	_, err = cs.CoreV1().ConfigMaps("ns1").Patch(ctx, "a", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"deny":"yes"}}}`), metav1.PatchOptions{})
	mustDeny("patch", err)
	if after, err := cs.CoreV1().ConfigMaps("ns1").Get(ctx, "a", metav1.GetOptions{}); err != nil || after.ResourceVersion != cur.ResourceVersion {
		t.Errorf("configmap after refused writes: %v, resourceVersion %s, want %s unchanged", err, after.ResourceVersion, cur.ResourceVersion)
	}
	adm.take()

	// Admit gets the request's context.
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/ns1/configmaps", strings.NewReader(`{"metadata":{"name":"c"}}`))
	r = r.WithContext(context.WithValue(r.Context(), testCtxKey{}, "the request's"))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.srv.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		t.Fatalf("POST configmap c = %d %s", w.Code, w.Body)
	}
	adm.mu.Lock()
	got := adm.ctxVal[len(adm.ctxVal)-1]
	adm.mu.Unlock()
	if got != "the request's" {
		t.Errorf("Admit's context value = %v, want the request's", got)
	}
}

// labelMutation adds a label to configmaps, replacing the object when
// the configmap asks for it, and refuses those labelled mutate=deny.
type labelMutation struct {
	mu    sync.Mutex
	calls []AdmissionAttributes
}

func (*labelMutation) Handles(gr schema.GroupResource) bool { return gr == grConfigMaps }

func (l *labelMutation) Mutate(_ context.Context, a *AdmissionAttributes) error {
	l.mu.Lock()
	l.calls = append(l.calls, AdmissionAttributes{Operation: a.Operation, Name: a.Name, Subresource: a.Subresource, OldObject: a.OldObject})
	l.mu.Unlock()
	cm := a.Object.(*corev1.ConfigMap)
	switch cm.Labels["mutate"] {
	case "deny":
		return apierrors.NewForbidden(a.Resource, a.Name, errors.New("mutation refused"))
	case "replace":
		cm = cm.DeepCopy()
		a.Object = cm
	case "wrong-type":
		a.Object = &corev1.Secret{}
		return nil
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["mutated"] = string(a.Operation)
	return nil
}

// TestMutatingAdmission: the server asks its MutatingAdmission before it
// prepares and validates a create or update, writes what it returns, and
// answers its refusal as is, writing nothing.
func TestMutatingAdmission(t *testing.T) {
	mut := &labelMutation{}
	adm := &recordingAdmission{handles: map[schema.GroupResource]bool{grConfigMaps: true}}
	h := startTestServer(t, func(c *Config) { c.Mutation, c.Admission = mut, adm })
	ctx := context.Background()
	cms := h.client.CoreV1().ConfigMaps("default")
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, how := range []string{"in-place", "replace"} {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: how + "-", Labels: map[string]string{"mutate": how}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: create: %v", how, err)
		}
		if cm.Labels["mutated"] != "CREATE" {
			t.Errorf("%s: created labels %v, want mutated=CREATE", how, cm.Labels)
		}
		got, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil || got.Labels["mutated"] != "CREATE" {
			t.Errorf("%s: stored %v, %v, want mutated=CREATE", how, got.Labels, err)
		}
		cm.Data = map[string]string{"k": "v"}
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil || cm.Labels["mutated"] != "UPDATE" {
			t.Errorf("%s: updated %v, %v, want mutated=UPDATE", how, cm.Labels, err)
		}
	}
	mut.mu.Lock()
	first := mut.calls[0]
	mut.mu.Unlock()
	if first.Name != "" || first.OldObject != nil {
		t.Errorf("first Mutate of a generateName create: name %q old %v, want no name yet and no old object", first.Name, first.OldObject)
	}
	// Validating admission sees the mutated object.
	if calls := adm.take(); len(calls) == 0 || om(calls[len(calls)-1].Object).GetLabels()["mutated"] != "UPDATE" {
		t.Errorf("validating admission did not see the mutation: %+v", calls)
	}

	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "denied", Labels: map[string]string{"mutate": "deny"}}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "mutation refused") {
		t.Errorf("create refused by mutation: %v, want its Forbidden", err)
	}
	if _, err := cms.Get(ctx, "denied", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after the refused create: %v, want NotFound", err)
	}
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "wrong", Labels: map[string]string{"mutate": "wrong-type"}}}, metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) {
		t.Errorf("create mutated into another type: %v, want 500", err)
	}
}
