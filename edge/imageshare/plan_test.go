package imageshare

import (
	"slices"
	"testing"
)

func TestSources(t *testing.T) {
	for _, tc := range []struct {
		name      string
		me        string
		announced bool
		peers     []Candidate
		bad       []string
		want      []string
	}{
		{name: "no peers", me: "b"},
		{name: "holders by name", me: "b", peers: []Candidate{{Name: "d", Has: true}, {Name: "a", Has: true}, {Name: "c"}},
			want: []string{"a", "d"}},
		{name: "holders before pullers", me: "b", peers: []Candidate{{Name: "a", Pulling: true}, {Name: "c", Has: true}},
			want: []string{"c", "a"}},
		{name: "not announced: any puller", me: "b", peers: []Candidate{{Name: "c", Pulling: true}, {Name: "a", Pulling: true}},
			want: []string{"a", "c"}},
		{name: "announced: lower pullers only", me: "b", announced: true, peers: []Candidate{{Name: "c", Pulling: true}, {Name: "a", Pulling: true}},
			want: []string{"a"}},
		{name: "announced, lowest: the registry", me: "a", announced: true, peers: []Candidate{{Name: "b", Pulling: true}, {Name: "c", Pulling: true}}},
		{name: "announced: a higher holder still serves", me: "a", announced: true, peers: []Candidate{{Name: "c", Has: true, Pulling: true}},
			want: []string{"c"}},
		{name: "bad skipped", me: "c", peers: []Candidate{{Name: "a", Has: true}, {Name: "b", Has: true}}, bad: []string{"a"},
			want: []string{"b"}},
		{name: "bad puller skipped", me: "c", announced: true, peers: []Candidate{{Name: "a", Pulling: true}}, bad: []string{"a"}},
		{name: "self left out", me: "a", peers: []Candidate{{Name: "a", Has: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := map[string]bool{}
			for _, b := range tc.bad {
				bad[b] = true
			}
			got := Sources(tc.me, tc.announced, tc.peers, bad)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Sources(%q, %v, %v, %v) = %q, want %q", tc.me, tc.announced, tc.peers, tc.bad, got, tc.want)
			}
		})
	}
}
