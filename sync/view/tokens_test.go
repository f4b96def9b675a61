package view

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/sync/wire"
)

func ptr[T any](v T) *T { return &v }

func tokenPod(mod func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Image: "nginx"}}},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func projected(name string, sources ...corev1.VolumeProjection) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}
}

func sat(path, audience string, exp *int64) corev1.VolumeProjection {
	return corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: path, Audience: audience, ExpirationSeconds: exp}}
}

var automount = TokenSource{Volume: wire.AutomountVolume, Path: "token", ExpirationSeconds: 3607, ServiceAccountDecides: true}

func TestTokenNeeds(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*corev1.Pod)
		sa   string
		want []TokenSource // nil: no needs
	}{
		{"plain pod: the automounted token", nil, "default", []TokenSource{automount}},
		{"named service account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "api" }, "api", []TokenSource{automount}},
		{"pod opts out", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr(false) }, "", nil},
		{"pod opts in: the service account cannot decline", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr(true) }, "default",
			[]TokenSource{{Path: "token", ExpirationSeconds: 3607}}},
		{"projected sources, sorted, with defaults", func(p *corev1.Pod) {
			p.Spec.AutomountServiceAccountToken = ptr(false)
			p.Spec.Volumes = []corev1.Volume{
				projected("vault", sat("vault-token", "vault", ptr(int64(600))), corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}),
				projected("api", sat("token", "", nil), sat("token", "", nil)),
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}
		}, "default", []TokenSource{
			{Volume: "api", Path: "token", ExpirationSeconds: 3600},
			{Volume: "vault", Path: "vault-token", Audience: "vault", ExpirationSeconds: 600},
		}},
		{"upstream's kube-api-access volume replaces the automounted token", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{projected("kube-api-access-x7k2p", sat("token", "", ptr(int64(3607))))}
		}, "default", []TokenSource{{Volume: "kube-api-access-x7k2p", Path: "token", ExpirationSeconds: 3607}}},
		{"terminated pod", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, "", nil},
		{"failed pod", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, "", nil},
		{"pod without a UID", func(p *corev1.Pod) { p.UID = "" }, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tokenNeeds(tokenPod(tc.mod))
			if tc.want == nil {
				if got != nil {
					t.Fatalf("tokenNeeds = %+v, want none", got)
				}
				return
			}
			if got == nil || got.uid != "uid-1" || got.serviceAccount != tc.sa || !reflect.DeepEqual(got.sources, tc.want) {
				t.Fatalf("tokenNeeds = %+v, want uid-1, service account %q, %+v", got, tc.sa, tc.want)
			}
		})
	}
}

func TestTokenSourceDeclined(t *testing.T) {
	for _, tc := range []struct {
		decides bool
		sa      *bool
		want    bool
	}{
		{true, nil, false},
		{true, ptr(true), false},
		{true, ptr(false), true},
		{false, ptr(false), false}, // the pod asked for it, or a projected source
	} {
		if got := (TokenSource{ServiceAccountDecides: tc.decides}).Declined(tc.sa); got != tc.want {
			t.Errorf("Declined(decides %v, sa %v) = %v, want %v", tc.decides, tc.sa, got, tc.want)
		}
	}
}

func TestTokenRefreshAt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		maxAge time.Duration
		life   time.Duration
		want   time.Duration // after t0
	}{
		{24 * time.Hour, week, 24 * time.Hour},                // the day's cap comes first
		{0, week, week / 5 * 4},                               // no cap: 80% of the real life
		{24 * time.Hour, 10 * time.Hour, 8 * time.Hour},       // a short life: 80% of it
		{24 * time.Hour, 30 * 24 * time.Hour, 24 * time.Hour}, // a long one asked for
		{365 * 24 * time.Hour, week, week / 5 * 4},            // a cap past 80%
		{24 * time.Hour, 0, 0},                                // already expired: now
		{time.Hour, 2 * time.Hour, time.Hour},                 // 80% of two hours is past the hour's cap
		{2 * time.Hour, 2 * time.Hour, 96 * time.Minute},      // 80% first
	} {
		p := TokenPolicy{MaxAge: tc.maxAge}
		if got := p.RefreshAt(t0, t0.Add(tc.life)); !got.Equal(t0.Add(tc.want)) {
			t.Errorf("RefreshAt(max age %v, life %v) = +%v, want +%v", tc.maxAge, tc.life, got.Sub(t0), tc.want)
		}
	}
	p := DefaultTokenPolicy()
	toks := []wire.PodToken{
		{IssuedAt: t0, Expiry: t0.Add(week)},
		{IssuedAt: t0, Expiry: t0.Add(10 * time.Hour)},
	}
	if got, want := p.TokensRevision(toks), t0.Add(8*time.Hour).Unix(); got != want {
		t.Errorf("TokensRevision = %d, want %d (the earliest refresh)", got, want)
	}
	if got := p.TokensRevision([]wire.PodToken{{}}); got != 1 {
		t.Errorf("TokensRevision of a token without times = %d, want 1", got)
	}
}

func tp(name, uid string) TokenPod {
	return TokenPod{Key: wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: name}, UID: uid, ServiceAccount: "default", Sources: []TokenSource{automount}}
}

func tkey(uid string) wire.Key { return wire.PodTokensKey("default", uid) }

func names(pods []TokenPod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Key.Name)
	}
	return out
}

// TestTokensPlan walks one node's tokens through a session: what the node
// said it holds, mints, refreshes, failures and pods that go.
func TestTokensPlan(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := DefaultTokenPolicy()
	p.MaxMints = 2
	// The node holds tokens of a (due in an hour), of b (due an hour
	// ago: it was away), of a pod that is gone, and of c's previous
	// incarnation (another UID); one entry is no token at all, one is
	// due far ahead of any refresh the hub would set.
	tk := NewTokens(p, []wire.InventoryEntry{
		{Key: tkey("a1"), Revision: t0.Add(time.Hour).Unix()},
		{Key: tkey("b1"), Revision: t0.Add(-time.Hour).Unix()},
		{Key: tkey("gone"), Revision: t0.Add(time.Hour).Unix()},
		{Key: tkey("c0"), Revision: t0.Add(time.Hour).Unix()},
		{Key: wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: "a"}, Revision: 5},
		{Key: tkey("e1"), Revision: t0.Add(365 * 24 * time.Hour).Unix()},
	}, t0)
	pods := []TokenPod{tp("a", "a1"), tp("b", "b1"), tp("c", "c1"), tp("d", "d1"), tp("e", "e1")}

	type step struct {
		now     time.Duration // after t0
		do      func()
		mint    []string
		deletes []wire.Key
		next    time.Duration // after t0; -1 for none
	}
	var plan TokenPlan
	for i, st := range []step{
		// b is due, c and d lack tokens: two of them now, more at once.
		{now: 0, mint: []string{"b", "c"}, deletes: []wire.Key{tkey("c0"), tkey("gone")}, next: 0},
		{now: 0, do: func() {
			tk.Minted(tkey("b1"), t0.Add(24*time.Hour))
			tk.Failed(tkey("c1"), t0)
			tk.Deleted(tkey("c0"))
			tk.Deleted(tkey("gone"))
		}, mint: []string{"d"}, next: time.Second},
		{now: 0, do: func() { tk.Minted(tkey("d1"), t0.Add(24*time.Hour)) }, next: time.Second},
		// c's back-off doubles.
		{now: time.Second, mint: []string{"c"}, next: time.Hour},
		{now: time.Second, do: func() { tk.Failed(tkey("c1"), t0.Add(time.Second)) }, next: 3 * time.Second},
		{now: 3 * time.Second, do: func() {}, mint: []string{"c"}, next: time.Hour},
		{now: 3 * time.Second, do: func() {
			if tk.Empty(tkey("c1"), t0.Add(3*time.Second)) {
				t.Error("Empty says the node holds c's tokens")
			}
		}, next: time.Hour},
		// a comes due; e's far-off refresh was capped to a day.
		{now: time.Hour, mint: []string{"a"}, next: 24 * time.Hour},
		{now: time.Hour, do: func() { tk.Minted(tkey("a1"), t0.Add(25*time.Hour)) }, next: 24 * time.Hour},
		{now: 24 * time.Hour, mint: []string{"b", "d"}, next: 24 * time.Hour},
		// a pod goes: its tokens are deleted; e's capped refresh is
		// due; c (nothing to hold) is asked again a day after it was.
		{now: 24 * time.Hour, do: func() {
			tk.Minted(tkey("b1"), t0.Add(48*time.Hour))
			tk.Minted(tkey("d1"), t0.Add(48*time.Hour))
			pods = slices.DeleteFunc(pods, func(p TokenPod) bool { return p.Key.Name == "d" })
		}, mint: []string{"e"}, deletes: []wire.Key{tkey("d1")}, next: 24*time.Hour + 3*time.Second},
	} {
		if st.do != nil {
			st.do()
		}
		plan = tk.Plan(pods, t0.Add(st.now))
		wantNext := time.Time{}
		if st.next >= 0 {
			wantNext = t0.Add(st.next)
		}
		if !slices.Equal(names(plan.Mint), st.mint) || !slices.Equal(plan.Delete, st.deletes) || !plan.Next.Equal(wantNext) {
			t.Fatalf("step %d: Plan(+%v) = mint %v, delete %v, next +%v; want %v, %v, +%v",
				i, st.now, names(plan.Mint), plan.Delete, plan.Next.Sub(t0), st.mint, st.deletes, st.next)
		}
	}
	if !tk.Empty(tkey("e1"), t0.Add(24*time.Hour)) {
		t.Error("Empty of e: want the node to hold its tokens, which the caller then deletes")
	}
}

// TestSessionTokenPods: a session lists the node's pods that need tokens,
// and only those, and its generation moves when they change.
func TestSessionTokenPods(t *testing.T) {
	x := NewIndex(DefaultConfig())
	podObj := func(name, node, uid string, mod func(*corev1.Pod)) []byte {
		p := tokenPod(mod)
		p.Name, p.Spec.NodeName, p.UID = name, node, types.UID(uid)
		return encode(t, p)
	}
	pk := func(name string) wire.Key {
		return wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: name}
	}
	if err := x.Reset(3, []Object{
		{Key: pk("a"), Revision: 1, Raw: podObj("a", "n1", "a1", nil)},
		{Key: pk("b"), Revision: 2, Raw: podObj("b", "n2", "b1", nil)},
		{Key: pk("c"), Revision: 3, Raw: podObj("c", "n1", "c1", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr(false) })},
	}); err != nil {
		t.Fatal(err)
	}
	s, _, _, err := x.Resume("n1", 0)
	if err == nil {
		t.Fatal("Resume(0) without history: want ErrNeedInventory")
	}
	s, _, _ = x.ResumeFromInventory("n1", nil)
	defer s.Close()
	pods, gen := s.TokenPods()
	if got := names(pods); !slices.Equal(got, []string{"a"}) || pods[0].UID != "a1" || pods[0].TokensKey() != tkey("a1") {
		t.Fatalf("TokenPods = %+v, want a (b is another node's, c needs none)", pods)
	}
	// A status change keeps the generation; a new pod moves it.
	apply := func(rev int64, key wire.Key, raw []byte) {
		t.Helper()
		if err := x.Apply([]Event{{Revision: rev, Key: key, Raw: raw}}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
	}
	apply(4, pk("a"), podObj("a", "n1", "a1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }))
	if g := s.TokenGeneration(); g != gen {
		t.Errorf("generation after a status change = %d, want %d", g, gen)
	}
	apply(5, pk("d"), podObj("d", "n1", "d1", nil))
	if pods, g := s.TokenPods(); g == gen || !slices.Equal(names(pods), []string{"a", "d"}) {
		t.Errorf("after pod d: TokenPods = %v, generation %d (was %d); want a, d and a new generation", names(pods), g, gen)
	}
	// A pod that terminates needs no tokens any more.
	apply(6, pk("a"), podObj("a", "n1", "a1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }))
	if pods, _ := s.TokenPods(); !slices.Equal(names(pods), []string{"d"}) {
		t.Errorf("after a succeeded: TokenPods = %v, want d", names(pods))
	}
}
