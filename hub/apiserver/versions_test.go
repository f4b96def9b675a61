package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	batchv1beta1 "k8s.io/api/batch/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// convertJSON converts between two Go types of one kind whose fields
// agree, as batch/v1 and v1beta1 CronJobs do for what these tests set.
func convertJSON[T runtime.Object](obj runtime.Object, out T) (runtime.Object, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, err
	}
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return out, nil
}

// cronJobVersions serves batch/v1 CronJobs and batch/v1beta1 ones stored
// as v1: a resource of Go types served at a version it is not stored at.
func cronJobVersions() []Resource {
	v1 := Resource{GroupVersion: batchv1.SchemeGroupVersion, Kind: "CronJob", Plural: "cronjobs", Singular: "cronjob", Namespaced: true,
		New: func() runtime.Object { return &batchv1.CronJob{} }, NewList: func() runtime.Object { return &batchv1.CronJobList{} },
		AddToScheme: batchv1.AddToScheme, Rules: testRules{}, Status: true}
	beta := v1
	beta.GroupVersion = batchv1beta1.SchemeGroupVersion
	beta.New = func() runtime.Object { return &batchv1beta1.CronJob{} }
	beta.NewList = func() runtime.Object { return &batchv1beta1.CronJobList{} }
	beta.AddToScheme = batchv1beta1.AddToScheme
	beta.Conversion = &Conversion{
		StorageVersion: "v1",
		NewStorage:     func() runtime.Object { return &batchv1.CronJob{} },
		ToStorage:      func(o runtime.Object) (runtime.Object, error) { return convertJSON(o, &batchv1.CronJob{}) },
		FromStorage:    func(o runtime.Object) (runtime.Object, error) { return convertJSON(o, &batchv1beta1.CronJob{}) },
	}
	return []Resource{v1, beta}
}

// TestConversionOfGoTypes: an object written at either version is stored
// at the storage version and read, listed (JSON and protobuf) and watched
// at each, every watcher getting its own version's events.
func TestConversionOfGoTypes(t *testing.T) {
	h := startTestServer(t, func(c *Config) { c.Resources = append(c.Resources, cronJobVersions()...) })
	ctx := context.Background()
	cs := h.client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w1, err := cs.BatchV1().CronJobs("ns1").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Stop()
	wBeta, err := cs.BatchV1beta1().CronJobs("ns1").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wBeta.Stop()

	created, err := cs.BatchV1beta1().CronJobs("ns1").Create(ctx, &batchv1beta1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: batchv1beta1.CronJobSpec{Schedule: "*/5 * * * *"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := h.store.Get(ctx, KeyPrefix(schema.GroupResource{Group: "batch", Resource: "cronjobs"})+"ns1/c", 0)
	if err != nil {
		t.Fatal(err)
	}
	var stored batchv1.CronJob
	if err := DecodeStored(kv.Value, &stored); err != nil || stored.Spec.Schedule != "*/5 * * * *" {
		t.Fatalf("stored %+v, %v, want the v1 CronJob", stored, err)
	}
	if !bytes.Contains(kv.Value, []byte("batch/v1\x12")) {
		t.Errorf("stored bytes do not name batch/v1: %q", kv.Value[:min(len(kv.Value), 40)])
	}

	v1, err := cs.BatchV1().CronJobs("ns1").Get(ctx, "c", metav1.GetOptions{})
	if err != nil || v1.Spec.Schedule != "*/5 * * * *" || v1.ResourceVersion != created.ResourceVersion {
		t.Fatalf("get v1 = %+v, %v", v1, err)
	}
	v1.Spec.Schedule = "@hourly"
	if _, err := cs.BatchV1().CronJobs("ns1").Update(ctx, v1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	beta, err := cs.BatchV1beta1().CronJobs("ns1").Get(ctx, "c", metav1.GetOptions{})
	if err != nil || beta.Spec.Schedule != "@hourly" {
		t.Fatalf("get v1beta1 after a v1 update = %+v, %v", beta, err)
	}
	if _, err := cs.BatchV1beta1().CronJobs("ns1").Patch(ctx, "c", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// Lists in protobuf (client-go's typed default) and JSON.
	list, err := cs.BatchV1beta1().CronJobs("ns1").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Spec.Suspend == nil || !*list.Items[0].Spec.Suspend {
		t.Fatalf("list v1beta1 = %+v, %v", list, err)
	}
	req, _ := http.NewRequest("GET", h.url+"/apis/batch/v1beta1/namespaces/ns1/cronjobs", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var jl unstructured.UnstructuredList
	if err := json.NewDecoder(resp.Body).Decode(&jl.Object); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	items, _, _ := unstructured.NestedSlice(jl.Object, "items")
	if len(items) != 1 || jl.Object["apiVersion"] != "batch/v1beta1" {
		t.Fatalf("JSON list of v1beta1: %v %v", jl.Object["apiVersion"], items)
	}
	if suspend, _, _ := unstructured.NestedBool(items[0].(map[string]any), "spec", "suspend"); !suspend {
		t.Errorf("JSON list of v1beta1: item %v, want spec.suspend", items[0])
	}

	for _, tc := range []struct {
		w       watch.Interface
		version string
	}{{w1, "v1"}, {wBeta, "v1beta1"}} {
		for i, want := range []watch.EventType{watch.Added, watch.Modified, watch.Modified} {
			select {
			case ev := <-tc.w.ResultChan():
				gv := ev.Object.GetObjectKind().GroupVersionKind().Version
				_, isV1 := ev.Object.(*batchv1.CronJob)
				if ev.Type != want || (tc.version == "v1") != isV1 {
					t.Errorf("watch %s event %d: %s %T (%s), want %s of the watched version", tc.version, i, ev.Type, ev.Object, gv, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("watch %s: no event %d", tc.version, i)
			}
		}
	}
}

// TestConversionNone: a custom resource's versions share its storage
// version, converting only apiVersion.
func TestConversionNone(t *testing.T) {
	beta := widgetResource()
	beta.GroupVersion.Version = "v1beta1"
	beta.Conversion = &Conversion{StorageVersion: "v1"}
	h := startTestServer(t, func(c *Config) { c.Resources = append(c.Resources, widgetResource(), beta) })
	ctx := context.Background()
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(&rest.Config{Host: h.url, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	betaGVR := widgetsGVR.GroupVersion().WithResource("widgets")
	betaGVR.Version = "v1beta1"
	w := widget("w1", 2)
	w.SetAPIVersion("example.outpost.dev/v1beta1")
	if _, err := dc.Resource(betaGVR).Namespace("ns1").Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := h.store.Get(ctx, KeyPrefix(widgetsGVR.GroupResource())+"ns1/w1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(kv.Value, []byte(`"apiVersion":"example.outpost.dev/v1"`)) {
		t.Errorf("stored %s, want apiVersion v1", kv.Value)
	}
	got, err := dc.Resource(widgetsGVR).Namespace("ns1").Get(ctx, "w1", metav1.GetOptions{})
	if err != nil || got.GetAPIVersion() != "example.outpost.dev/v1" {
		t.Fatalf("get v1 = %v, %v", got, err)
	}
	got, err = dc.Resource(betaGVR).Namespace("ns1").Get(ctx, "w1", metav1.GetOptions{})
	if err != nil || got.GetAPIVersion() != "example.outpost.dev/v1beta1" {
		t.Fatalf("get v1beta1 = %v, %v", got, err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 2 {
		t.Errorf("v1beta1 spec.size = %d, want 2", size)
	}
}

// TestConversionChecks: New refuses a conversion it could not run.
func TestConversionChecks(t *testing.T) {
	st := startTestServer(t).store
	for name, c := range map[string]*Conversion{
		"own version":      {StorageVersion: "v1beta1"},
		"no storage":       {},
		"typed without fn": {StorageVersion: "v1"},
		"one way":          {StorageVersion: "v1", NewStorage: func() runtime.Object { return &batchv1.CronJob{} }, ToStorage: func(o runtime.Object) (runtime.Object, error) { return o, nil }},
	} {
		rs := cronJobVersions()
		rs[1].Conversion = c
		if _, err := New(Config{Store: st, Resources: append(testResources(), rs...)}); err == nil {
			t.Errorf("%s: New accepted the conversion", name)
		}
	}
}

// approvalSubresource serves configmaps/approval, which may change
// data.approved alone, and not to "never".
var approvalSubresource = Subresource{
	Name: "approval",
	Update: func(obj, old runtime.Object) {
		o := old.(*corev1.ConfigMap)
		if o.Data == nil {
			o.Data = map[string]string{}
		}
		o.Data["approved"] = obj.(*corev1.ConfigMap).Data["approved"]
	},
	Validate: func(obj, old runtime.Object) field.ErrorList {
		if v := obj.(*corev1.ConfigMap).Data["approved"]; v == "never" {
			return field.ErrorList{field.Invalid(field.NewPath("data", "approved"), v, "may not be never")}
		}
		return nil
	},
}

// TestSubresources: a resource's own status-like subresource updates what
// it may, through PUT and PATCH, is listed in discovery, and refuses what
// its validation refuses.
func TestSubresources(t *testing.T) {
	h := startTestServer(t, func(c *Config) {
		for i := range c.Resources {
			if c.Resources[i].Plural == "configmaps" {
				c.Resources[i].Subresources = []Subresource{approvalSubresource}
			}
		}
	})
	ctx := context.Background()
	cs := h.client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"k": "changed", "approved": "yes"}
	cm.Labels = map[string]string{"ignored": "yes"}
	var got corev1.ConfigMap
	if err := cs.CoreV1().RESTClient().Put().Namespace("ns1").Resource("configmaps").Name("a").SubResource("approval").Body(cm).Do(ctx).Into(&got); err != nil {
		t.Fatal(err)
	}
	if got.Data["approved"] != "yes" || got.Data["k"] != "v" || got.Labels["ignored"] != "" {
		t.Errorf("PUT approval stored data %v labels %v, want approved=yes alone changed", got.Data, got.Labels)
	}
	if err := cs.CoreV1().RESTClient().Patch(types.MergePatchType).Namespace("ns1").Resource("configmaps").Name("a").SubResource("approval").
		Body([]byte(`{"data":{"approved":"later","k":"x"}}`)).Do(ctx).Into(&got); err != nil {
		t.Fatal(err)
	}
	if got.Data["approved"] != "later" || got.Data["k"] != "v" {
		t.Errorf("PATCH approval: data %v, want approved=later alone changed", got.Data)
	}
	err = cs.CoreV1().RESTClient().Patch(types.MergePatchType).Namespace("ns1").Resource("configmaps").Name("a").SubResource("approval").
		Body([]byte(`{"data":{"approved":"never"}}`)).Do(ctx).Error()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "data.approved") {
		t.Errorf("PATCH approval to never: %v, want 422 on data.approved", err)
	}
	list, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	var listed bool
	for _, r := range list.APIResources {
		listed = listed || r.Name == "configmaps/approval"
	}
	if !listed {
		t.Error("discovery does not list configmaps/approval")
	}
	for _, name := range []string{"status", "binding", ""} {
		rs := testResources()
		rs[1].Subresources = []Subresource{{Name: name, Update: approvalSubresource.Update}}
		if _, err := New(Config{Store: h.store, Resources: rs}); err == nil {
			t.Errorf("New accepted a subresource named %q", name)
		}
	}
}

// TestSetResources: resources added at run time are served and listed in
// discovery at once; removing them ends their watches and serves 404; a
// resource already served is refused and changes nothing.
func TestSetResources(t *testing.T) {
	h := startTestServer(t)
	ctx := context.Background()
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(&rest.Config{Host: h.url, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	widgets := dc.Resource(widgetsGVR).Namespace("ns1")
	if _, err := widgets.List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("list before SetResources: %v, want NotFound", err)
	}
	if err := h.srv.SetResources("widgets.example.outpost.dev", []Resource{widgetResource()}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Discovery().ServerResourcesForGroupVersion(widgetsGVR.GroupVersion().String()); err != nil {
		t.Fatalf("discovery after SetResources: %v", err)
	}
	if _, err := widgets.Create(ctx, widget("w1", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := widgets.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("watch: %v, want the ADDED of w1", ev)
	}

	if err := h.srv.SetResources("other", []Resource{widgetResource()}); err == nil {
		t.Error("a second owner of widgets was accepted")
	}
	if _, err := widgets.Get(ctx, "w1", metav1.GetOptions{}); err != nil {
		t.Errorf("get after the refused SetResources: %v", err)
	}

	if err := h.srv.SetResources("widgets.example.outpost.dev", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-deadline:
			t.Fatal("the watch of a removed resource did not end")
		}
	}
	if _, err := widgets.Get(ctx, "w1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after removal: %v, want NotFound", err)
	}
	if _, err := h.client.Discovery().ServerResourcesForGroupVersion(widgetsGVR.GroupVersion().String()); !apierrors.IsNotFound(err) {
		t.Errorf("discovery after removal: %v, want NotFound", err)
	}
	// The objects stay in the store: deleting them is the owner's work.
	if _, err := h.store.Get(ctx, KeyPrefix(widgetsGVR.GroupResource())+"ns1/w1", 0); err != nil {
		t.Errorf("stored widget after removal: %v", err)
	}
}

// finalizingRules add a finalizer on delete, as a CRD's do.
type finalizingRules struct{ testRules }

func (finalizingRules) FinalizersOnDelete(runtime.Object) []string {
	return []string{"example.outpost.dev/cleanup"}
}

// TestDeleteFinalizer: the first delete of an object whose rules add
// finalizers marks it; it goes when its owner removes them.
func TestDeleteFinalizer(t *testing.T) {
	h := startTestServer(t, func(c *Config) { c.Resources[0].Rules = finalizingRules{} })
	ctx := context.Background()
	nss := h.client.CoreV1().Namespaces()
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1", Finalizers: []string{"mine"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nss.Delete(ctx, "ns1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := nss.Get(ctx, "ns1", metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp == nil || strings.Join(ns.Finalizers, ",") != "mine,example.outpost.dev/cleanup" {
		t.Fatalf("after delete: %+v, %v; want it marked with both finalizers", ns.ObjectMeta, err)
	}
	// A second delete adds nothing.
	if err := nss.Delete(ctx, "ns1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns.Finalizers = nil
	if _, err := nss.Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nss.Get(ctx, "ns1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after its finalizers went: %v, want NotFound", err)
	}
}
