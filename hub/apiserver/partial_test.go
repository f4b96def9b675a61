package apiserver

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// TestMetadataClient: client-go's metadata client (as used by metadata
// informers and garbage collectors) gets, lists and watches objects as
// PartialObjectMetadata.
func TestMetadataClient(t *testing.T) {
	h := startTestServer(t)
	ctx := context.Background()
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"x": "1"}}, Data: map[string]string{"big": "value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h.srv)
	defer hs.Close()
	mc, err := metadata.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	cms := mc.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("ns1")
	got, err := cms.Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Name != "a" || got.Labels["x"] != "1" {
		t.Fatalf("metadata Get = %+v, %v", got, err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.ResourceVersion == "" {
		t.Fatalf("metadata List = %+v, %v", list, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := cms.Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := h.client.CoreV1().ConfigMaps("ns1").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		pm, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if ev.Type != watch.Added || !ok || pm.Name != "b" {
			t.Fatalf("metadata watch event %s %#v", ev.Type, ev.Object)
		}
	case <-wctx.Done():
		t.Fatal("no metadata watch event")
	}
}
