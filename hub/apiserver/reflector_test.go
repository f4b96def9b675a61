package apiserver

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestReflectorRelistsAfterCompaction: a reflector whose resourceVersion
// was compacted away gets 410 Gone, lists again and carries on.
func TestReflectorRelistsAfterCompaction(t *testing.T) {
	h := startTestServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cms := h.client.CoreV1().ConfigMaps("ns1")
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var lists, gone atomic.Int32
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return cms.List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			// Short watches, so the reflector re-watches from its last
			// resourceVersion often.
			one := int64(1)
			o.TimeoutSeconds = &one
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				lists.Add(1) // client-go lists by streaming: a watch with initial events
			}
			w, err := cms.Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if e.Type == watch.Error {
					gone.Add(1)
				}
				return e, true
			}), nil
		},
	}
	st := cache.NewStore(cache.MetaNamespaceKeyFunc)
	r := cache.NewReflector(lw, &corev1.ConfigMap{}, st, 0)
	go r.Run(ctx.Done())

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		wait.For(t, time.Minute, what, func() (bool, string) {
			return cond(), fmt.Sprintf("lists %d, 410s %d, store %v", lists.Load(), gone.Load(), st.ListKeys())
		})
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the first object", func() bool { _, ok, _ := st.GetByKey("ns1/a"); return ok })
	// Writes elsewhere move the revision on; compacting to it leaves the
	// reflector's resourceVersion behind.
	for i := 0; i < 5; i++ {
		if _, err := h.client.CoreV1().Secrets("ns1").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cur, _ := h.store.Revision(ctx)
	if err := h.store.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	waitFor("a 410 and a re-list", func() bool { return gone.Load() > 0 && lists.Load() >= 2 })
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the object created after the re-list", func() bool { _, ok, _ := st.GetByKey("ns1/b"); return ok })
}
