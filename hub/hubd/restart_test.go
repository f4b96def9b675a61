package hubd

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// freeAddr returns a loopback address with a port free at the moment, so
// that a restarted hub comes back where its clients look for it.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRestartKeepsObjects: a restarted hub has every object, its
// resourceVersions keep increasing, and an informer running across the
// restart converges.
func TestRestartKeepsObjects(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	h, stop := startHub(t, dir, func(c *Config) { c.APIAddr = addr }, noControllers)
	cs := kubernetes.NewForConfigOrDie(adminConfig(t, h))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var lastRV int64
	for i := 0; i < 20; i++ {
		cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lastRV, _ = strconv.ParseInt(cm.ResourceVersion, 10, 64)
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().ConfigMaps().Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	defer func() { cancel(); f.Shutdown() }()

	stop()
	startHub(t, dir, func(c *Config) { c.APIAddr = addr }, noControllers)

	list, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 20 {
		t.Fatalf("list after restart = %d items, %v; want 20", len(list.Items), err)
	}
	ns, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil || len(ns.Items) != len(defaultNamespaces) {
		t.Fatalf("namespaces after restart = %d, %v; want the %d defaults once", len(ns.Items), err, len(defaultNamespaces))
	}
	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64); rv <= lastRV {
		t.Fatalf("resourceVersion after restart %d, want > %d", rv, lastRV)
	}
	if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, "cm-00", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, "informer converged after the restart", func() (bool, string) {
		_, hasNew, _ := inf.GetStore().GetByKey("default/after")
		_, hasOld, _ := inf.GetStore().GetByKey("default/cm-00")
		// The test's own, in default: the hub keeps ConfigMaps of its
		// own in kube-system (extension-apiserver-authentication).
		var keys []string
		for _, k := range inf.GetStore().ListKeys() {
			if strings.HasPrefix(k, "default/") {
				keys = append(keys, k)
			}
		}
		return hasNew && !hasOld && len(keys) == 20, fmt.Sprint(keys)
	})
}
