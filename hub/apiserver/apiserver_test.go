package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// testRules are minimal rules for the machinery's own tests (the real
// rules live in hub/registry): names must be non-empty, nothing else.
type testRules struct {
	fields func(runtime.Object) fields.Set
}

func (testRules) Default(runtime.Object)                   {}
func (testRules) PrepareForCreate(runtime.Object)          {}
func (testRules) PrepareForUpdate(obj, old runtime.Object) {}
func (testRules) AllowCreateOnUpdate() bool                { return false }
func (testRules) Validate(obj runtime.Object) field.ErrorList {
	m := obj.(metav1.Object)
	if m.GetName() == "" {
		return field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")}
	}
	return nil
}
func (testRules) ValidateUpdate(obj, old runtime.Object) field.ErrorList { return nil }
func (r testRules) Fields(obj runtime.Object) fields.Set {
	if r.fields != nil {
		return r.fields(obj)
	}
	return nil
}
func (testRules) Columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name"}}
}
func (testRules) Row(obj runtime.Object) []interface{} {
	return []interface{}{obj.(metav1.Object).GetName()}
}

func testResources() []Resource {
	return []Resource{
		{GroupVersion: corev1.SchemeGroupVersion, Kind: "Namespace", Plural: "namespaces", Singular: "namespace", ShortNames: []string{"ns"},
			New: func() runtime.Object { return &corev1.Namespace{} }, NewList: func() runtime.Object { return &corev1.NamespaceList{} }, AddToScheme: corev1.AddToScheme,
			Status: true, Rules: testRules{}},
		{GroupVersion: corev1.SchemeGroupVersion, Kind: "ConfigMap", Plural: "configmaps", Singular: "configmap", ShortNames: []string{"cm"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.ConfigMap{} }, NewList: func() runtime.Object { return &corev1.ConfigMapList{} }, AddToScheme: corev1.AddToScheme,
			Rules: testRules{}},
		{GroupVersion: corev1.SchemeGroupVersion, Kind: "Secret", Plural: "secrets", Singular: "secret", Namespaced: true,
			New: func() runtime.Object { return &corev1.Secret{} }, NewList: func() runtime.Object { return &corev1.SecretList{} }, AddToScheme: corev1.AddToScheme,
			Rules: testRules{fields: func(o runtime.Object) fields.Set { return fields.Set{"type": string(o.(*corev1.Secret).Type)} }}},
	}
}

type testHub struct {
	srv    *Server
	store  *badgerstore.Store
	client *kubernetes.Clientset
	url    string
}

// startTestServer serves testResources over a fresh store, with opts
// applied to the configuration.
func startTestServer(t *testing.T, opts ...func(*Config)) *testHub {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := Config{Store: st, Resources: testResources(), BookmarkInterval: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown) // ends watches, so that hs.Close can return
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &testHub{srv: srv, store: st, client: cs, url: hs.URL}
}

func TestCRUDWithClientGo(t *testing.T) {
	h := startTestServer(t)
	ctx := context.Background()
	cs := h.client
	if _, err := cs.CoreV1().ConfigMaps("nope").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("create in a missing namespace = %v, want NotFound", err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"app": "x"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.UID == "" || cm.ResourceVersion == "" || cm.CreationTimestamp.IsZero() || cm.Namespace != "ns1" {
		t.Fatalf("created %+v lacks system metadata", cm.ObjectMeta)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create = %v, want AlreadyExists", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create without name = %v, want Invalid", err)
	}
	gen, err := cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}}, metav1.CreateOptions{})
	if err != nil || len(gen.Name) != len("gen-")+5 {
		t.Fatalf("generateName create = %v, %v", gen.Name, err)
	}
	// Update with a stale resourceVersion conflicts; RetryOnConflict resolves.
	stale := cm.DeepCopy()
	cm.Data["k"] = "v2"
	if _, err := cs.CoreV1().ConfigMaps("ns1").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.Data["k"] = "stale"
	if _, err := cs.CoreV1().ConfigMaps("ns1").Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update = %v, want Conflict", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cs.CoreV1().ConfigMaps("ns1").Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Data["k"] = "v3"
		_, err = cs.CoreV1().ConfigMaps("ns1").Update(ctx, stale, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			stale = cur
		}
		return err
	})
	if err != nil {
		t.Fatalf("RetryOnConflict = %v", err)
	}
	// A UID in the body is a precondition; without a resourceVersion the
	// update is unconditional.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "not-a"}, Data: map[string]string{"k": "other"}}
	if _, err := cs.CoreV1().ConfigMaps("ns1").Update(ctx, other, metav1.UpdateOptions{}); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "UID in precondition: not-a") {
		t.Fatalf("update of another UID = %v, want a UID precondition Conflict", err)
	}
	same := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: cm.UID}, Data: map[string]string{"k": "v4"}}
	if got, err := cs.CoreV1().ConfigMaps("ns1").Update(ctx, same, metav1.UpdateOptions{}); err != nil || got.Data["k"] != "v4" {
		t.Fatalf("unconditional update of the same UID = %v, %v", got.Data, err)
	}
	// Patches of all three kinds.
	for _, p := range []struct {
		pt   types.PatchType
		body string
		want string
	}{
		{types.MergePatchType, `{"data":{"m":"1"}}`, "1"},
		{types.StrategicMergePatchType, `{"data":{"m":"2"}}`, "2"},
		{types.JSONPatchType, `[{"op":"replace","path":"/data/m","value":"3"}]`, "3"},
	} {
		got, err := cs.CoreV1().ConfigMaps("ns1").Patch(ctx, "a", p.pt, []byte(p.body), metav1.PatchOptions{})
		if err != nil || got.Data["m"] != p.want {
			t.Fatalf("%s patch = %v, %v", p.pt, got.Data, err)
		}
	}
	// An update that changes nothing writes nothing: no new
	// resourceVersion.
	cur, err := cs.CoreV1().ConfigMaps("ns1").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := cs.CoreV1().ConfigMaps("ns1").Update(ctx, cur.DeepCopy(), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != cur.ResourceVersion {
		t.Fatalf("update that changes nothing: resourceVersion %s, want %s unchanged", again.ResourceVersion, cur.ResourceVersion)
	}
	// Lists with selectors and paging.
	for i := 0; i < 5; i++ {
		if _, err := cs.CoreV1().Secrets("ns1").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)}, Type: corev1.SecretType(fmt.Sprintf("t%d", i%2))}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := cs.CoreV1().Secrets("ns1").List(ctx, metav1.ListOptions{FieldSelector: "type=t1"})
	if err != nil || len(l.Items) != 2 {
		t.Fatalf("field-selected list = %d items, %v", len(l.Items), err)
	}
	if _, err := cs.CoreV1().Secrets("ns1").List(ctx, metav1.ListOptions{FieldSelector: "spec.bogus=1"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("unsupported field selector = %v, want BadRequest", err)
	}
	var names []string
	opts := metav1.ListOptions{Limit: 2}
	for {
		page, err := cs.CoreV1().Secrets("").List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Items {
			names = append(names, s.Name)
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if fmt.Sprint(names) != "[s0 s1 s2 s3 s4]" {
		t.Fatalf("paged list = %v", names)
	}
	if err := cs.CoreV1().ConfigMaps("ns1").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns1").Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete = %v, want NotFound", err)
	}
}

func TestInformerSeesChanges(t *testing.T) {
	h := startTestServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := h.client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 100)
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().ConfigMaps().Informer()
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { events <- "add " + o.(*corev1.ConfigMap).Name },
		UpdateFunc: func(_, o any) { events <- "update " + o.(*corev1.ConfigMap).Data["k"] },
		DeleteFunc: func(o any) { events <- "delete" },
	})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	cm, err := cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"k": "v"}
	if _, err := cs.CoreV1().ConfigMaps("ns1").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("ns1").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"add a", "update v", "delete"} {
		select {
		case got := <-events:
			if got != want {
				t.Fatalf("informer event %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no informer event, want %q", want)
		}
	}
	cancel()
	f.Shutdown()
}
