package hubd

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/outpost-mesh/outpost/hub/aggregator"
	"github.com/outpost-mesh/outpost/hub/auth"
)

// TestAPIServiceDiscovery: once a service-backed APIService is
// Available, its group version is in /apis, /apis/GROUP and aggregated
// discovery with the resources its extension server lists, and client-go
// discovers them either way; once its Service goes, so do they.
func TestAPIServiceDiscovery(t *testing.T) {
	ext, srv, caBundle := startExtensionServer(t, "kube-system", "widgets")
	h, _, log := startAggregatorHub(t, srv.Listener.Addr().String())
	kube, _, ac := hubClients(t, h, log)
	ctx := context.Background()
	waitFor(t, "extension-apiserver-authentication published", func(ctx context.Context) (bool, error) {
		cm, err := kube.CoreV1().ConfigMaps(aggregator.TrustNamespace).Get(ctx, aggregator.TrustName, metav1.GetOptions{})
		if err == nil {
			ext.trust(t, cm)
		}
		return err == nil, nil
	})
	exposeService(t, kube, "kube-system", "widgets")
	if _, err := ac.ApiregistrationV1().APIServices().Create(ctx, widgetAPIService("kube-system", "widgets", caBundle), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg, hc := inprocConfig(h, "test", func(*http.Request) auth.User { return hubUser }, log)
	clients := map[string]*discovery.DiscoveryClient{}
	for _, legacy := range []bool{false, true} {
		dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
		if err != nil {
			t.Fatal(err)
		}
		dc.UseLegacyDiscovery = legacy
		clients[map[bool]string{false: "aggregated", true: "legacy"}[legacy]] = dc
	}
	// widgets reports whether dc discovers metrics.example.com/v1 widgets.
	widgets := func(dc *discovery.DiscoveryClient) (bool, error) {
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
			return false, err
		}
		for _, l := range lists {
			for _, r := range l.APIResources {
				if l.GroupVersion == "metrics.example.com/v1" && r.Name == "widgets" && r.Kind == "Widget" {
					return true, nil
				}
			}
		}
		return false, nil
	}
	for name, dc := range clients {
		waitFor(t, name+" discovery lists widgets", func(context.Context) (bool, error) { return widgets(dc) })
	}
	groups, err := clients["legacy"].ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	// Ordered by the APIServices' groupPriorityMinimum, as
	// kube-aggregator: its own apiregistration.k8s.io first (after the
	// core group client-go puts before all), apps (17800) before
	// metrics.example.com (1000).
	index := map[string]int{}
	for i, g := range groups.Groups {
		index[g.Name] = i
		if g.Name == "metrics.example.com" && g.PreferredVersion.Version != "v1" {
			t.Errorf("metrics.example.com prefers %v, want v1", g.PreferredVersion)
		}
	}
	if m, ok := index["metrics.example.com"]; !ok || index["apiregistration.k8s.io"] != 1 || index["apps"] > m {
		t.Errorf("/apis lists groups in order %v, want apiregistration.k8s.io first and apps before metrics.example.com", index)
	}
	body, err := clients["legacy"].RESTClient().Get().AbsPath("/apis/metrics.example.com").SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET /apis/metrics.example.com: %v", err)
	}
	var g metav1.APIGroup
	if err := json.Unmarshal(body, &g); err != nil || g.Name != "metrics.example.com" || len(g.Versions) != 1 {
		t.Errorf("GET /apis/metrics.example.com = %s, %v; want the group with v1", body, err)
	}

	if err := kube.CoreV1().Services("kube-system").Delete(ctx, "widgets", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, dc := range clients {
		waitFor(t, name+" discovery drops widgets", func(context.Context) (bool, error) {
			ok, err := widgets(dc)
			return !ok, err
		})
	}
	if _, err := clients["legacy"].RESTClient().Get().AbsPath("/apis/metrics.example.com").DoRaw(ctx); err == nil {
		t.Error("GET /apis/metrics.example.com after the Service went: found, want 404")
	}
}
