package hubd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// rcPods returns the names of the live pods of ns that sel selects, each
// with the uid of its controller ("" for an orphan).
func rcPods(t *testing.T, cs kubernetes.Interface, ns, sel string) map[string]types.UID {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for i := range l.Items {
		p := &l.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		out[p.Name] = ""
		if ref := metav1.GetControllerOf(p); ref != nil {
			out[p.Name] = ref.UID
		}
	}
	return out
}

// countOwned returns how many of pods uid controls.
func countOwned(pods map[string]types.UID, uid types.UID) int {
	n := 0
	for _, u := range pods {
		if u == uid {
			n++
		}
	}
	return n
}

func testRC(name string, replicas int32) *corev1.ReplicationController {
	labels := map[string]string{"rc": name}
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: ptr.To(replicas),
			// No selector: the API defaults it to the template's labels.
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				// An image no node pulls: the pods exist but never run.
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/never:1"}}},
			},
		},
	}
}

// TestReplicationController runs a hub with its controllers: an RC
// adopts a matching orphan and creates the rest of its pods, releases a
// pod relabelled out of its selector and replaces it, scales through its
// scale subresource and reports status; the garbage collector orphans its
// pods when it is deleted with propagationPolicy Orphan, and deletes them
// with Background and Foreground.
func TestReplicationController(t *testing.T) {
	h, _ := startHub(t, t.TempDir())
	cs := kubernetes.NewForConfigOrDie(adminConfig(t, h))
	ctx := context.Background()
	rcs := cs.CoreV1().ReplicationControllers("default")
	pods := cs.CoreV1().Pods("default")

	stray := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stray", Labels: map[string]string{"rc": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/never:1"}}},
	}
	if _, err := pods.Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.Create(ctx, testRC("web", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Spec.Selector["rc"] != "web" {
		t.Fatalf("created RC's selector %v, want the template's labels", rc.Spec.Selector)
	}
	status := func(want int32) func() (bool, string) {
		return func() (bool, string) {
			got, err := rcs.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			owned := countOwned(rcPods(t, cs, "default", "rc=web"), rc.UID)
			st := got.Status
			return owned == int(want) && st.Replicas == want && st.FullyLabeledReplicas == want &&
					st.ObservedGeneration == got.Generation,
				fmt.Sprintf("%d pods owned, status %+v, generation %d", owned, st, got.Generation)
		}
	}
	wait.For(t, 30*time.Second, "the orphan adopted and one more pod", func() (bool, string) {
		ok, msg := status(2)()
		pods := rcPods(t, cs, "default", "rc=web")
		return ok && pods["stray"] == rc.UID, fmt.Sprint(msg, pods)
	})
	p, err := pods.Get(ctx, "stray", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "ReplicationController" || ref.APIVersion != "v1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("adopted pod's controller reference %+v", ref)
	}

	if _, err := pods.Patch(ctx, "stray", types.MergePatchType, []byte(`{"metadata":{"labels":{"rc":"elsewhere"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the relabelled pod released and replaced", func() (bool, string) {
		p, err := pods.Get(ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ok, msg := status(2)()
		return ok && len(p.OwnerReferences) == 0, fmt.Sprintf("%s; stray's references %v", msg, p.OwnerReferences)
	})

	// The scale carries the RC's resourceVersion, which the controller's
	// status writes move on: read again on a conflict, as kubectl scale.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := rcs.GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = 3
		_, err = rcs.UpdateScale(ctx, "web", scale, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "scaled to 3", status(3))
	wait.For(t, 10*time.Second, "the scale's status", func() (bool, string) {
		s, err := rcs.GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return s.Status.Replicas == 3 && s.Status.Selector == "rc=web", fmt.Sprintf("%+v", s.Status)
	})

	// Orphan: the RC goes, its pods stay, without their reference to it.
	if err := rcs.Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the RC gone and its pods orphaned", func() (bool, string) {
		_, err := rcs.Get(ctx, "web", metav1.GetOptions{})
		pods := rcPods(t, cs, "default", "rc=web")
		return apierrors.IsNotFound(err) && len(pods) == 3 && countOwned(pods, "") == 3, fmt.Sprint(err, pods)
	})

	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		name := "gc-" + strings.ToLower(string(policy))
		sel := "rc=" + name
		made, err := rcs.Create(ctx, testRC(name, 2), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wait.For(t, 30*time.Second, name+"'s pods", func() (bool, string) {
			pods := rcPods(t, cs, "default", sel)
			return countOwned(pods, made.UID) == 2, fmt.Sprint(pods)
		})
		if err := rcs.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(policy)}); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 30*time.Second, name+" and its pods deleted", func() (bool, string) {
			_, err := rcs.Get(ctx, name, metav1.GetOptions{})
			pods := rcPods(t, cs, "default", sel)
			return apierrors.IsNotFound(err) && len(pods) == 0, fmt.Sprint(err, pods)
		})
	}
}

// widgetsCRD returns a CRD with versions v1 and v2, stored at storage.
func widgetsCRD(storage string) *apiextensionsv1.CustomResourceDefinition {
	schemaAny := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", XPreserveUnknownFields: ptr.To(true)}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.svm.outpost.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "svm.outpost.dev",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: storage == "v1", Schema: schemaAny},
				{Name: "v2", Served: true, Storage: storage == "v2", Schema: schemaAny},
			},
		},
	}
}

// TestStorageVersionMigration runs a hub with its controllers: the
// objects of a CRD whose storage version was switched from v1 to v2 are
// rewritten by a migration, which succeeds, and v1 is then trimmed from
// the CRD's status.storedVersions.
func TestStorageVersionMigration(t *testing.T) {
	h, _ := startHub(t, t.TempDir())
	cfg := adminConfig(t, h)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ext := apiextensionsclient.NewForConfigOrDie(cfg)
	dc := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, widgetsCRD("v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	widgets := dc.Resource(schema.GroupVersionResource{Group: "svm.outpost.dev", Version: "v1", Resource: "widgets"}).Namespace("default")
	wait.For(t, 30*time.Second, "widgets served", func() (bool, string) {
		_, err := widgets.List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	create := func(name string) *unstructured.Unstructured {
		t.Helper()
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "svm.outpost.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": int64(1)}}}
		got, err := widgets.Create(ctx, w, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	old := map[string]string{}
	for _, name := range []string{"a", "b"} {
		old[name] = create(name).GetResourceVersion()
	}
	probe := create("probe")

	crd, err := crds.Get(ctx, "widgets.svm.outpost.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crd.Spec.Versions = widgetsCRD("v2").Spec.Versions
	if _, err := crds.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The switch is in effect once a no-op patch rewrites the probe (its
	// stored bytes change from v1 to v2).
	wait.For(t, 30*time.Second, "storage at v2", func() (bool, string) {
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q}}`, probe.GetResourceVersion())
		got, err := widgets.Patch(ctx, "probe", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.GetResourceVersion() != probe.GetResourceVersion() {
			probe = got
			return true, ""
		}
		return false, "probe not rewritten"
	})

	svms := cs.StoragemigrationV1().StorageVersionMigrations()
	if _, err := svms.Create(ctx, &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: "svm.outpost.dev", Resource: "widgets"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the migration to succeed", func() (bool, string) {
		m, err := svms.Get(ctx, "widgets", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, string(svmv1.MigrationSucceeded))
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "StorageVersionMigrationSucceeded" && m.Status.ResourceVersion != "",
			fmt.Sprintf("%+v", m.Status)
	})
	for name, rv := range old {
		got, err := widgets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetResourceVersion() == rv {
			t.Errorf("widget %s still at resourceVersion %s: not rewritten", name, rv)
		}
	}
	got, err := widgets.Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetResourceVersion() != probe.GetResourceVersion() {
		t.Errorf("probe, stored at v2 already, rewritten: resourceVersion %s, was %s", got.GetResourceVersion(), probe.GetResourceVersion())
	}

	// Once it has ended, the migration stops Running and, as upstream's
	// runner does, the CRD keeps only the version its objects are now
	// stored at.
	wait.For(t, 30*time.Second, "the migration completed and v1 trimmed", func() (bool, string) {
		m, err := svms.Get(ctx, "widgets", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		crd, err := crds.Get(ctx, "widgets.svm.outpost.dev", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var migrating *apiextensionsv1.CustomResourceDefinitionCondition
		for i := range crd.Status.Conditions {
			if crd.Status.Conditions[i].Type == apiextensionsv1.StorageMigrating {
				migrating = &crd.Status.Conditions[i]
			}
		}
		return meta.IsStatusConditionFalse(m.Status.Conditions, string(svmv1.MigrationRunning)) &&
				fmt.Sprint(crd.Status.StoredVersions) == "[v2]" && migrating != nil &&
				migrating.Status == apiextensionsv1.ConditionFalse && migrating.Reason == "MigrationSucceeded",
			fmt.Sprintf("migration %+v; CRD %+v", m.Status, crd.Status)
	})
}
