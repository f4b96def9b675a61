package apiserver_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// startCore serves the core/v1 resources with their real rules.
func startCore(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: core.Resources()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs, hs.URL
}

func ptr[T any](v T) *T { return &v }

// TestDeletePropagation: a delete's propagation options become the
// garbage collector's finalizers as upstream's generic registry sets them.
func TestDeletePropagation(t *testing.T) {
	cs, _ := startCore(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gc"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bg, fg, orphan := metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan
	for _, tc := range []struct {
		name string
		// finalizers the object is created with
		have []string
		// successive deletes
		deletes []metav1.DeleteOptions
		// want: the finalizers left, or gone
		want []string
		gone bool
	}{
		{name: "no options", deletes: []metav1.DeleteOptions{{}}, gone: true},
		{name: "background", deletes: []metav1.DeleteOptions{{PropagationPolicy: &bg}}, gone: true},
		{name: "foreground", deletes: []metav1.DeleteOptions{{PropagationPolicy: &fg}}, want: []string{metav1.FinalizerDeleteDependents}},
		{name: "orphan", deletes: []metav1.DeleteOptions{{PropagationPolicy: &orphan}}, want: []string{metav1.FinalizerOrphanDependents}},
		{name: "orphanDependents true", deletes: []metav1.DeleteOptions{{OrphanDependents: ptr(true)}}, want: []string{metav1.FinalizerOrphanDependents}},
		{name: "orphanDependents false", deletes: []metav1.DeleteOptions{{OrphanDependents: ptr(false)}}, gone: true},
		{name: "orphan finalizer kept without options", have: []string{metav1.FinalizerOrphanDependents}, deletes: []metav1.DeleteOptions{{}}, want: []string{metav1.FinalizerOrphanDependents}},
		{name: "orphan finalizer dropped by background", have: []string{metav1.FinalizerOrphanDependents}, deletes: []metav1.DeleteOptions{{PropagationPolicy: &bg}}, gone: true},
		{name: "other finalizer kept", have: []string{"example.com/hold"}, deletes: []metav1.DeleteOptions{{PropagationPolicy: &fg}}, want: []string{"example.com/hold", metav1.FinalizerDeleteDependents}},
		{name: "foreground then orphan", deletes: []metav1.DeleteOptions{{PropagationPolicy: &fg}, {PropagationPolicy: &orphan}}, want: []string{metav1.FinalizerOrphanDependents}},
		{name: "foreground then background", deletes: []metav1.DeleteOptions{{PropagationPolicy: &fg}, {PropagationPolicy: &bg}}, gone: true},
		{name: "foreground twice", deletes: []metav1.DeleteOptions{{PropagationPolicy: &fg}, {}}, want: []string{metav1.FinalizerDeleteDependents}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ToLower(strings.ReplaceAll(tc.name, " ", "-"))
			cms := cs.CoreV1().ConfigMaps("gc")
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: tc.have}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, d := range tc.deletes {
				if err := cms.Delete(ctx, name, d); err != nil {
					t.Fatalf("delete %+v: %v", d, err)
				}
			}
			got, err := cms.Get(ctx, name, metav1.GetOptions{})
			switch {
			case tc.gone && apierrors.IsNotFound(err):
				return
			case tc.gone:
				t.Fatalf("after the deletes: %v %v, want gone", got.Finalizers, err)
			case err != nil:
				t.Fatal(err)
			}
			if !slices.Equal(got.Finalizers, tc.want) || got.DeletionTimestamp == nil {
				t.Errorf("finalizers %v, deletionTimestamp %v; want %v and set", got.Finalizers, got.DeletionTimestamp, tc.want)
			}
			// Removing the finalizers lets it go.
			got.Finalizers = nil
			if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cms.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("get after the finalizers are removed: %v, want NotFound", err)
			}
		})
	}
	// Bad options: 422 on DeleteOptions, as upstream.
	cms := cs.CoreV1().ConfigMaps("gc")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	weird := metav1.DeletionPropagation("Sideways")
	for _, d := range []metav1.DeleteOptions{{PropagationPolicy: &weird}, {PropagationPolicy: &bg, OrphanDependents: ptr(true)}} {
		err := cms.Delete(ctx, "bad", d)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "propagationPolicy") {
			t.Errorf("delete with %+v: %v, want 422 on propagationPolicy", d, err)
		}
	}
}

// TestOrphanDependentsFalseAccepted: upstream answers 202 to the old
// clients that cascade with orphanDependents=false while the object stays.
func TestOrphanDependentsFalseAccepted(t *testing.T) {
	cs, url := startCore(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest("DELETE", url+"/api/v1/namespaces/default/configmaps/held?orphanDependents=false", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("DELETE ?orphanDependents=false of a held object = %d, want 202", resp.StatusCode)
	}
}

// TestNamespaceLifecycle: a deleted namespace is Terminating, keeps its
// content for the namespace controller, refuses new content with
// upstream's 403, and goes once finalized.
func TestNamespaceLifecycle(t *testing.T) {
	cs, _ := startCore(t)
	ctx := context.Background()
	nss := cs.CoreV1().Namespaces()
	ns, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{corev1.FinalizerKubernetes}) || ns.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("new namespace: finalizers %v phase %q, want [kubernetes] Active", ns.Spec.Finalizers, ns.Status.Phase)
	}
	// A user cannot drop the finalizer with an update.
	ns.Spec.Finalizers = nil
	if ns, err = nss.Update(ctx, ns, metav1.UpdateOptions{}); err != nil || len(ns.Spec.Finalizers) != 1 {
		t.Fatalf("update without finalizers: %v %v, want them kept", ns.Spec.Finalizers, err)
	}
	if _, err := cs.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bg := metav1.DeletePropagationBackground
	if err := nss.Delete(ctx, "doomed", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	ns, err = nss.Get(ctx, "doomed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Phase != corev1.NamespaceTerminating || ns.DeletionTimestamp == nil || len(ns.Finalizers) != 0 {
		t.Fatalf("deleted namespace: phase %q deletionTimestamp %v finalizers %v, want Terminating, set, none", ns.Status.Phase, ns.DeletionTimestamp, ns.Finalizers)
	}
	if _, err := cs.CoreV1().ConfigMaps("doomed").Get(ctx, "old", metav1.GetOptions{}); err != nil {
		t.Errorf("content of a Terminating namespace: %v, want it left for the namespace controller", err)
	}
	// New content is refused, as upstream's NamespaceLifecycle does.
	_, err = cs.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
	var se *apierrors.StatusError
	if !apierrors.IsForbidden(err) || !errorsAs(err, &se) {
		t.Fatalf("create in a Terminating namespace: %v, want 403", err)
	}
	if want := `configmaps "new" is forbidden: unable to create new content in namespace doomed because it is being terminated`; se.ErrStatus.Message != want {
		t.Errorf("message %q, want %q", se.ErrStatus.Message, want)
	}
	if d := se.ErrStatus.Details; d == nil || len(d.Causes) != 1 || d.Causes[0].Type != corev1.NamespaceTerminatingCause || d.Causes[0].Field != "metadata.namespace" {
		t.Errorf("details %+v, want the NamespaceTerminating cause on metadata.namespace", d)
	}
	// Deleting again changes nothing while the finalizer remains.
	if err := nss.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	again, err := nss.Get(ctx, "doomed", metav1.GetOptions{})
	if err != nil || again.ResourceVersion != ns.ResourceVersion {
		t.Fatalf("after a second delete: %v, rv %s want %s", err, again.ResourceVersion, ns.ResourceVersion)
	}
	// Conditions go through status.
	ns.Status.Conditions = []corev1.NamespaceCondition{{Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain"}}
	if ns, err = nss.UpdateStatus(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// finalize removes the finalizer and, with it the last, the namespace.
	ns.Spec.Finalizers = nil
	if _, err := nss.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finalize: %v", err)
	}
	if _, err := nss.Get(ctx, "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after finalize: %v, want NotFound", err)
	}
}

// TestNamespaceFinalizeKeepsOtherFinalizers: a namespace goes only once
// both its spec's and its metadata's finalizers are gone, and finalize
// changes nothing but those.
func TestNamespaceFinalizeKeepsOtherFinalizers(t *testing.T) {
	cs, _ := startCore(t)
	ctx := context.Background()
	nss := cs.CoreV1().Namespaces()
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}},
		Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"example.com/spec"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := nss.Finalize(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}, Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"example.com/spec"}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Phase != corev1.NamespaceActive || len(ns.Spec.Finalizers) != 1 {
		t.Fatalf("finalize of an Active namespace: phase %q finalizers %v, want Active (status kept) and [example.com/spec]", ns.Status.Phase, ns.Spec.Finalizers)
	}
	if err := nss.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ns, err = nss.Get(ctx, "held", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if ns, err = nss.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ns, err = nss.Get(ctx, "held", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace with a metadata finalizer after finalize: %v, want it kept", err)
	}
	ns.Finalizers = nil
	if _, err := nss.Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nss.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get once every finalizer is gone: %v, want NotFound", err)
	}
}

func errorsAs(err error, se **apierrors.StatusError) bool { return errors.As(err, se) }
