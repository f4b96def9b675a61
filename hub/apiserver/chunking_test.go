package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestChunkedLists: a limited list without selectors tells how many
// objects its continuations hold (remainingItemCount), one with a
// selector does not; a continue token whose revision was compacted away
// gets 410 Gone carrying a token that continues the same list at the
// latest revision, and that inconsistent continuation reads on from the
// same key, with what changed meanwhile, as upstream's chunking e2e spec
// expects.
func TestChunkedLists(t *testing.T) {
	rs := startRaw(t, 0)
	const total = 40
	for i := range total {
		cm := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%03d","labels":{"even":"%v"}}}`, i, i%2 == 0)
		if code, body := rs.do(t, "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", cm); code != 201 {
			t.Fatalf("create = %d %s", code, body)
		}
	}
	list := func(query url.Values) (int, corev1.ConfigMapList, metav1.Status) {
		t.Helper()
		code, body := rs.do(t, "GET", "/api/v1/namespaces/ns1/configmaps?"+query.Encode(), "", "")
		var l corev1.ConfigMapList
		var st metav1.Status
		target := any(&l)
		if code != 200 {
			target = &st
		}
		if err := json.Unmarshal([]byte(body), target); err != nil {
			t.Fatalf("list %v = %d %.200s: %v", query, code, body, err)
		}
		return code, l, st
	}
	remaining := func(l corev1.ConfigMapList) string {
		if l.RemainingItemCount == nil {
			return "nil"
		}
		return fmt.Sprint(*l.RemainingItemCount)
	}

	// Pages of 17: 23 remain after the first, 6 after the second, none
	// (nil) after the last.
	q := url.Values{"limit": {"17"}}
	var names []string
	for _, want := range []string{"23", "6", "nil"} {
		code, l, st := list(q)
		if code != 200 {
			t.Fatalf("page: %d %v", code, st.Message)
		}
		if got := remaining(l); got != want {
			t.Fatalf("remainingItemCount = %s after %d items, want %s", got, len(names), want)
		}
		for _, cm := range l.Items {
			names = append(names, cm.Name)
		}
		q.Set("continue", l.Continue)
	}
	if len(names) != total {
		t.Fatalf("paged list has %d items, want %d", len(names), total)
	}
	if _, l, _ := list(url.Values{"limit": {"5"}, "labelSelector": {"even=true"}}); l.Continue == "" || l.RemainingItemCount != nil {
		t.Fatalf("selected list: continue %q, remainingItemCount %s; want a continue and no count", l.Continue, remaining(l))
	}

	// The first page, then changes behind it and a compaction.
	_, first, _ := list(url.Values{"limit": {"10"}})
	if code, body := rs.do(t, "DELETE", "/api/v1/namespaces/ns1/configmaps/cm-015", "", ""); code != 200 {
		t.Fatalf("delete = %d %s", code, body)
	}
	if code, body := rs.do(t, "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-999"}}`); code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	ctx := context.Background()
	cur, err := rs.store.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.store.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	code, _, st := list(url.Values{"limit": {"10"}, "continue": {first.Continue}})
	if code != 410 || st.Reason != metav1.StatusReasonExpired || st.Continue == "" {
		t.Fatalf("continue after compaction = %d %s %q with continue %q; want 410 Expired with a continue token", code, st.Reason, st.Message, st.Continue)
	}
	code, second, st := list(url.Values{"limit": {"10"}, "continue": {st.Continue}})
	if code != 200 {
		t.Fatalf("inconsistent continue = %d %s", code, st.Message)
	}
	if second.ResourceVersion == first.ResourceVersion {
		t.Fatalf("inconsistent continuation at the first page's revision %s", first.ResourceVersion)
	}
	if got := second.Items[0].Name + ".." + second.Items[9].Name; got != "cm-010..cm-020" {
		t.Fatalf("inconsistent continuation = %s, want cm-010..cm-020 (cm-015 deleted)", got)
	}
	// cm-021..cm-039 and cm-999.
	if got := remaining(second); got != "20" {
		t.Fatalf("remainingItemCount of the inconsistent continuation = %s, want 20", got)
	}
	code, third, _ := list(url.Values{"limit": {"10"}, "continue": {second.Continue}})
	if code != 200 || third.ResourceVersion != second.ResourceVersion || remaining(third) != "10" {
		t.Fatalf("next page = %d at %s with %s remaining; want 200 at %s with 10", code, third.ResourceVersion, remaining(third), second.ResourceVersion)
	}
}
