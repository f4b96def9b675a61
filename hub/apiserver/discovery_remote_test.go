package apiserver

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// TestRemoteGroups: a remote group version appears in legacy and
// aggregated discovery, its versions ordered by versionPriority, with
// the resources given; one the server serves itself stays its own; and
// SetRemoteGroups(nil) removes them.
func TestRemoteGroups(t *testing.T) {
	srv, _, url := startDiscoveryServer(t)
	metrics := []metav1.APIResource{{Name: "widgets", SingularName: "widget", Namespaced: true, Kind: "Widget", Verbs: metav1.Verbs{"get", "list"}}}
	err := srv.SetRemoteGroups([]RemoteGroupVersion{
		{GroupVersion: schema.GroupVersion{Group: "metrics.example.com", Version: "v1"}, VersionPriority: 10, Resources: metrics},
		{GroupVersion: schema.GroupVersion{Group: "metrics.example.com", Version: "v2"}, VersionPriority: 5},
		{GroupVersion: widgetsGVR.GroupVersion(), VersionPriority: 100, Resources: metrics}, // served here: ignored
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, legacy := range []bool{true, false} {
		dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: url, QPS: -1})
		if err != nil {
			t.Fatal(err)
		}
		dc.UseLegacyDiscovery = legacy
		groups, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatalf("ServerGroupsAndResources (legacy %v): %v", legacy, err)
		}
		var g *metav1.APIGroup
		for _, x := range groups {
			if x.Name == "metrics.example.com" {
				g = x
			}
		}
		if g == nil || len(g.Versions) != 2 || g.Versions[0].Version != "v1" || g.PreferredVersion.Version != "v1" {
			t.Errorf("legacy %v: group metrics.example.com = %+v, want v1 (preferred) then v2", legacy, g)
		}
		var names []string
		for _, l := range lists {
			for _, r := range l.APIResources {
				names = append(names, l.GroupVersion+" "+r.Name)
			}
		}
		if !slices.Contains(names, "metrics.example.com/v1 widgets") {
			t.Errorf("legacy %v: resources %v lack metrics.example.com/v1 widgets", legacy, names)
		}
		if !slices.Contains(names, widgetsGVR.GroupVersion().String()+" widgets") {
			t.Errorf("legacy %v: resources %v lack the server's own %s", legacy, names, widgetsGVR)
		}
	}
	resp, _ := get(t, url+"/apis/metrics.example.com/v1/widgets")
	if resp.StatusCode != 404 {
		t.Errorf("GET of a remote resource from the server itself: %d, want 404", resp.StatusCode)
	}

	if err := srv.SetRemoteGroups(nil); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/apis/metrics.example.com", "/apis/metrics.example.com/v1"} {
		if resp, _ := get(t, url+path); resp.StatusCode != 404 {
			t.Errorf("GET %s after SetRemoteGroups(nil): %d, want 404", path, resp.StatusCode)
		}
	}
	resp, body := get(t, url+"/apis", "Accept", acceptV2)
	if resp.StatusCode != 200 || strings.Contains(string(body), "metrics.example.com") {
		t.Errorf("aggregated /apis after SetRemoteGroups(nil) = %d %s", resp.StatusCode, body)
	}
}

// TestGroupPriorities: /apis and the aggregated document list the groups
// with a priority first, highest first, then the others by name.
func TestGroupPriorities(t *testing.T) {
	srv, _, url := startDiscoveryServer(t)
	metrics := schema.GroupVersion{Group: "metrics.example.com", Version: "v1"}
	if err := srv.SetRemoteGroups([]RemoteGroupVersion{{GroupVersion: metrics}}); err != nil {
		t.Fatal(err)
	}
	order := func(accept string) []string {
		t.Helper()
		resp, body := get(t, url+"/apis", "Accept", accept)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /apis: %d %s", resp.StatusCode, body)
		}
		var list struct {
			Groups []struct{ Name string } `json:"groups"`
			Items  []struct {
				Metadata struct{ Name string } `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range list.Groups {
			names = append(names, g.Name)
		}
		for _, g := range list.Items {
			names = append(names, g.Metadata.Name)
		}
		return names
	}
	byName := order("application/json")
	if !slices.IsSorted(byName) {
		t.Errorf("/apis without priorities = %v, want by name", byName)
	}
	if err := srv.SetGroupPriorities(map[string]int32{metrics.Group: 100, widgetsGVR.Group: 200}); err != nil {
		t.Fatal(err)
	}
	for _, accept := range []string{"application/json", acceptV2} {
		got := order(accept)
		if len(got) < 2 || got[0] != widgetsGVR.Group || got[1] != metrics.Group || !slices.IsSorted(got[2:]) {
			t.Errorf("/apis (Accept %s) with priorities = %v, want %s, %s, then by name", accept, got, widgetsGVR.Group, metrics.Group)
		}
	}
}
