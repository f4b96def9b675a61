package usage_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/hub/usage"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// labels is a fixed usage.Labels.
type labels struct {
	nodes map[string]map[string]string
	pods  map[types.NamespacedName]map[string]string
}

func (l labels) NodeLabels(context.Context) (map[string]map[string]string, error) {
	return l.nodes, nil
}

func (l labels) PodLabels(_ context.Context, ns string) (map[types.NamespacedName]map[string]string, error) {
	out := map[types.NamespacedName]map[string]string{}
	for k, v := range l.pods {
		if ns == "" || k.Namespace == ns {
			out[k] = v
		}
	}
	return out, nil
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func report(cpu uint64, pods ...wire.PodUsage) *wire.Usage {
	return &wire.Usage{Time: time.Now(), Window: 15 * time.Second, Node: wire.ResourceUsage{CPU: cpu, Memory: 300 << 20}, Pods: pods}
}

func podUsage(ns, name string, cpu uint64) wire.PodUsage {
	return wire.PodUsage{Namespace: ns, Name: name, Containers: []wire.ContainerUsage{{Name: "main", ResourceUsage: wire.ResourceUsage{CPU: cpu, Memory: 10 << 20}}}}
}

// TestMetricsAPI serves the store through the API machinery and reads it
// as kubectl top does: discovery, then the metrics clientset.
func TestMetricsAPI(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)}
	cfg := usage.DefaultConfig()
	cfg.Now = clk.Now
	s, err := usage.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lbl := labels{
		nodes: map[string]map[string]string{"edge-1": {"site": "a"}, "edge-2": {"site": "b"}},
		pods: map[types.NamespacedName]map[string]string{
			{Namespace: "default", Name: "web"}: {"app": "web"},
			{Namespace: "default", Name: "db"}:  {"app": "db"},
			{Namespace: "other", Name: "web"}:   {"app": "web"},
		},
	}
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	api, err := apiserver.New(apiserver.Config{Store: st, Resources: append(core.Resources(), usage.Resources(s, lbl)...), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api)
	t.Cleanup(hs.Close)
	rc := &rest.Config{Host: hs.URL, QPS: -1}

	// kubectl top first checks that the group is served.
	dc := discovery.NewDiscoveryClientForConfigOrDie(rc)
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool {
		return g.Name == "metrics.k8s.io" && g.PreferredVersion.Version == "v1beta1"
	}) {
		t.Fatalf("discovery lacks metrics.k8s.io/v1beta1: %+v", groups.Groups)
	}
	rl, err := dc.ServerResourcesForGroupVersion("metrics.k8s.io/v1beta1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rl.APIResources {
		if !slices.Equal(r.Verbs, []string{"get", "list"}) {
			t.Errorf("metrics resource %s verbs %v, want get and list", r.Name, r.Verbs)
		}
	}

	s.PutUsage("edge-1", report(250e6, podUsage("default", "web", 5e6), podUsage("default", "db", 7e6), podUsage("default", "ghost", 1)))
	s.PutUsage("edge-2", report(100e6, podUsage("other", "web", 3e6)))
	s.PutUsage("deleted", report(1)) // a node the hub no longer has

	mc := metricsclient.NewForConfigOrDie(rc).MetricsV1beta1()
	ctx := context.Background()
	nodes, err := mc.NodeMetricses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"edge-1", "edge-2"}) {
		t.Errorf("node metrics of %v, want edge-1 and edge-2", names)
	}
	if got := nodes.Items[0].Usage[corev1.ResourceCPU]; got.MilliValue() != 250 {
		t.Errorf("edge-1 CPU = %v, want 250m", got.String())
	}
	if got := nodes.Items[0].Usage[corev1.ResourceMemory]; got.Value() != 300<<20 || nodes.Items[0].Window.Duration != 15*time.Second {
		t.Errorf("edge-1 memory = %v, window %v; want 300Mi over 15s", got.String(), nodes.Items[0].Window)
	}
	if sel, err := mc.NodeMetricses().List(ctx, metav1.ListOptions{LabelSelector: "site=b"}); err != nil || len(sel.Items) != 1 || sel.Items[0].Name != "edge-2" {
		t.Errorf("node metrics site=b = %+v, %v; want edge-2", sel, err)
	}

	pods, err := mc.PodMetricses("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 || pods.Items[0].Name != "db" || pods.Items[1].Name != "web" {
		t.Errorf("pod metrics of default = %+v, want db and web (ghost is no pod of the hub's)", pods.Items)
	}
	all, err := mc.PodMetricses("").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(all.Items) != 2 {
		t.Errorf("pod metrics app=web in all namespaces = %+v, %v; want 2", all, err)
	}
	pm, err := mc.PodMetricses("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := pm.Containers; len(c) != 1 || c[0].Name != "main" || c[0].Usage.Cpu().MilliValue() != 5 || pm.Labels["app"] != "web" {
		t.Errorf("pod metrics default/web = %+v, want main at 5m with the pod's labels", pm)
	}
	if _, err := mc.PodMetricses("default").Get(ctx, "ghost", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get pod metrics of a pod the hub lacks = %v, want NotFound", err)
	}
	if _, err := mc.NodeMetricses().Get(ctx, "edge-1", metav1.GetOptions{}); err != nil {
		t.Errorf("get node metrics edge-1 = %v", err)
	}

	// Reports grow old: after MaxAge the node's are gone, unless an
	// Unchanged report renewed them.
	clk.add(cfg.MaxAge / 2)
	s.PutUsage("edge-2", &wire.Usage{Unchanged: true})
	s.PutUsage("deleted-too", &wire.Usage{Unchanged: true}) // nothing to renew
	clk.add(cfg.MaxAge / 2)
	if nodes, err := mc.NodeMetricses().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 1 || nodes.Items[0].Name != "edge-2" || nodes.Items[0].Usage.Cpu().MilliValue() != 100 {
		t.Errorf("node metrics after edge-1's aged out = %+v, %v; want only edge-2, renewed at 100m", nodes, err)
	}
	if _, err := mc.PodMetricses("default").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod metrics of a node whose report aged out = %v, want NotFound", err)
	}
	s.Forget("edge-2")
	if nodes, err := mc.NodeMetricses().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 0 {
		t.Errorf("node metrics after Forget = %+v, %v; want none", nodes, err)
	}
}
