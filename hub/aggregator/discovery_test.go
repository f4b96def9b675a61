package aggregator

import (
	"maps"
	"math"
	"strings"
	"testing"

	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

func TestDecodeResourceList(t *testing.T) {
	tests := []struct {
		name, body, group, version string
		want                       []string // resource names; nil with wantErr
		wantErr                    bool
	}{
		{name: "group", group: "metrics.example.com", version: "v1",
			body: `{"kind":"APIResourceList","groupVersion":"metrics.example.com/v1","resources":[{"name":"widgets","kind":"Widget","verbs":["get"]},{"name":"widgets/status","kind":"Widget"}]}`,
			want: []string{"widgets", "widgets/status"}},
		{name: "legacy", group: "", version: "v1", body: `{"groupVersion":"v1","resources":[{"name":"pods","kind":"Pod"}]}`, want: []string{"pods"}},
		{name: "empty", group: "g.io", version: "v1", body: `{"groupVersion":"g.io/v1","resources":[]}`, want: []string{}},
		{name: "other group version", group: "g.io", version: "v1", body: `{"groupVersion":"g.io/v2","resources":[]}`, wantErr: true},
		{name: "no kind", group: "g.io", version: "v1", body: `{"groupVersion":"g.io/v1","resources":[{"name":"x"}]}`, wantErr: true},
		{name: "not json", group: "g.io", version: "v1", body: `<html>`, wantErr: true},
		{name: "too large", group: "g.io", version: "v1", body: `{"groupVersion":"g.io/v1","x":"` + strings.Repeat("a", MaxDiscoveryBytes) + `"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeResourceList(strings.NewReader(tt.body), tt.group, tt.version)
			if (err != nil) != tt.wantErr {
				t.Fatalf("DecodeResourceList() error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			names := []string{}
			for _, r := range got {
				names = append(names, r.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Errorf("DecodeResourceList() = %v, want %v", names, tt.want)
			}
		})
	}
}

// FuzzDecodeResourceList: any body decodes to resources that each have a
// name and kind, or to an error; never a panic.
func FuzzDecodeResourceList(f *testing.F) {
	f.Add(`{"groupVersion":"g.io/v1","resources":[{"name":"widgets","kind":"Widget","verbs":["get","list"],"shortNames":["wd"]}]}`)
	f.Add(`{"groupVersion":"g.io/v1","resources":null}`)
	f.Add(`{"groupVersion":"g.io/v1","resources":[{}]}`)
	f.Add(`[]`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, body string) {
		got, err := DecodeResourceList(strings.NewReader(body), "g.io", "v1")
		if err != nil {
			return
		}
		for _, r := range got {
			if r.Name == "" || r.Kind == "" {
				t.Fatalf("DecodeResourceList(%q) = %+v: a resource without a name or kind", body, r)
			}
		}
	})
}

func TestSortedDiscovered(t *testing.T) {
	m := map[string]DiscoveredGroupVersion{
		"v1.b.io":      {Group: "b.io", Version: "v1", GroupPriorityMinimum: 100, VersionPriority: 10},
		"v2.b.io":      {Group: "b.io", Version: "v2", GroupPriorityMinimum: 100, VersionPriority: 20},
		"v1.a.io":      {Group: "a.io", Version: "v1", GroupPriorityMinimum: 100, VersionPriority: 10},
		"v1beta1.z.io": {Group: "z.io", Version: "v1beta1", GroupPriorityMinimum: 2000, VersionPriority: 1},
	}
	var got []string
	for _, gv := range sortedDiscovered(m) {
		got = append(got, gv.Version+"."+gv.Group)
	}
	if want := "v1beta1.z.io,v1.a.io,v2.b.io,v1.b.io"; strings.Join(got, ",") != want {
		t.Errorf("sortedDiscovered() = %v, want %s", got, want)
	}
}

func TestGroupPriorities(t *testing.T) {
	svc := func(group string, prio int32) *apiregistrationv1.APIService {
		return &apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{Group: group, GroupPriorityMinimum: prio}}
	}
	got := groupPriorities([]*apiregistrationv1.APIService{svc("a.io", 5), svc("a.io", 50), svc("b.io", 7), svc("", 18000)})
	want := map[string]int32{"a.io": 50, "b.io": 7, "": 18000, "apiregistration.k8s.io": math.MaxInt32}
	if !maps.Equal(got, want) {
		t.Errorf("groupPriorities() = %v, want %v", got, want)
	}
}
