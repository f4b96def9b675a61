package view

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/podrefs"
	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestViewMembership(t *testing.T) {
	secret := func(ns, name string) wire.Key {
		return wire.Key{Resource: wire.ResourceSecrets, Namespace: ns, Name: name}
	}
	tests := []struct {
		name    string
		changes []change
		want    []string // View("n1")
	}{{
		name: "own node, services and slices",
		changes: []change{
			{key: key("nodes//n1")}, {key: key("nodes//n2")},
			{key: key("services/default/api")}, {key: key("endpointslices/kube-system/dns-1")},
		},
		want: []string{"endpointslices/kube-system/dns-1", "nodes//n1", "services/default/api"},
	}, {
		name: "referenced objects that exist",
		changes: []change{
			{key: key("pods/default/web"), spec: &podSpec{node: "n1", secrets: []string{"s1", "missing"}, configMaps: []string{"c1"}}},
			{key: key("secrets/default/s1")}, {key: key("configmaps/default/c1")}, {key: key("configmaps/default/c2")},
		},
		want: []string{"configmaps/default/c1", "pods/default/web", "secrets/default/s1"},
	}, {
		name: "another node's pod and its references",
		changes: []change{
			{key: key("pods/default/web"), spec: &podSpec{node: "n2", secrets: []string{"s1"}}},
			{key: key("secrets/default/s1")}, {key: key("serviceaccounts/default/default")},
		},
	}, {
		name: "unbound pod",
		changes: []change{
			{key: key("pods/default/web"), spec: &podSpec{secrets: []string{"s1"}}},
			{key: key("secrets/default/s1")},
		},
	}, {
		name: "references are in the pod's namespace",
		changes: []change{
			{key: key("pods/shop/web"), spec: &podSpec{node: "n1", secrets: []string{"s1"}}},
			{key: secret("shop", "s1")}, {key: secret("default", "s1")},
		},
		want: []string{"pods/shop/web", "secrets/shop/s1"},
	}, {
		name: "service account, default when unset",
		changes: []change{
			{key: key("pods/default/a"), spec: &podSpec{node: "n1"}},
			{key: key("pods/default/b"), spec: &podSpec{node: "n1", sa: "build"}},
			{key: key("serviceaccounts/default/default")}, {key: key("serviceaccounts/default/build")},
			{key: key("serviceaccounts/default/unused")},
		},
		want: []string{"pods/default/a", "pods/default/b", "serviceaccounts/default/build", "serviceaccounts/default/default"},
	}, {
		name: "every kind of reference",
		changes: []change{
			{key: key("pods/default/web"), spec: &podSpec{node: "n1", secrets: []string{"vol"}, configMaps: []string{"vcm"},
				projSecrets: []string{"proj"}, projConfigMaps: []string{"pcm"}, envSecrets: []string{"env"},
				envConfigMaps: []string{"ecm"}, fromSecrets: []string{"from"}, fromConfigMaps: []string{"fcm"}, pull: []string{"pull"}}},
			{key: secret("default", "vol")}, {key: key("configmaps/default/vcm")}, {key: secret("default", "proj")},
			{key: key("configmaps/default/pcm")}, {key: secret("default", "env")}, {key: key("configmaps/default/ecm")},
			{key: secret("default", "from")}, {key: key("configmaps/default/fcm")}, {key: secret("default", "pull")},
		},
		want: []string{"configmaps/default/ecm", "configmaps/default/fcm", "configmaps/default/pcm", "configmaps/default/vcm",
			"pods/default/web", "secrets/default/env", "secrets/default/from", "secrets/default/proj",
			"secrets/default/pull", "secrets/default/vol"},
	}, {
		name: "undecodable pod",
		changes: []change{
			{key: key("pods/default/web"), spec: &podSpec{node: "n1", secrets: []string{"s1"}, garbage: true}},
			{key: key("secrets/default/s1")},
		},
	}, {
		name: "Nodes of its site, not of others nor unlabelled",
		changes: []change{
			{key: key("nodes//n1"), node: &nodeSpec{site: "east"}}, {key: key("nodes//n2"), node: &nodeSpec{site: "east"}},
			{key: key("nodes//n3"), node: &nodeSpec{site: "west"}}, {key: key("nodes//n4")},
			{key: key("nodes//n5"), node: &nodeSpec{site: "east", garbage: true}},
		},
		want: []string{"nodes//n1", "nodes//n2"},
	}, {
		name: "no site of its own",
		changes: []change{
			{key: key("nodes//n1")}, {key: key("nodes//n2"), node: &nodeSpec{site: "east"}}, {key: key("nodes//n3")},
		},
		want: []string{"nodes//n1"},
	}, {
		name: "no Node of its own",
		changes: []change{
			{key: key("nodes//n2"), node: &nodeSpec{site: "east"}}, {key: key("nodes//n3"), node: &nodeSpec{site: "east"}},
		},
	}, {
		name: "objects of no view",
		changes: []change{
			{key: key("events/default/e1")},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Once as events, once as a snapshot.
			w := newWorld(t, DefaultConfig())
			for _, c := range tt.changes {
				w.commit(c)
			}
			var got []string
			for _, e := range w.x.View("n1") {
				got = append(got, e.Key.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("View(n1) after Apply = %v, want %v", got, tt.want)
			}
			if d := diffViews(inventoryMap(w.x.View("n1")), w.viewAt(w.rev, "n1")); d != "" {
				t.Errorf("View(n1) differs from the world's view:%s", d)
			}
			w.x = NewIndex(DefaultConfig())
			w.reset()
			got = nil
			for _, e := range w.x.View("n1") {
				got = append(got, e.Key.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("View(n1) after Reset = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPodRefs(t *testing.T) {
	sec := func(n string) wire.Key { return wire.Key{Resource: wire.ResourceSecrets, Namespace: "ns", Name: n} }
	cm := func(n string) wire.Key { return wire.Key{Resource: wire.ResourceConfigMaps, Namespace: "ns", Name: n} }
	sa := func(n string) wire.Key {
		return wire.Key{Resource: wire.ResourceServiceAccounts, Namespace: "ns", Name: n}
	}
	ref := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	envFrom := func(s, c string) []corev1.EnvFromSource {
		return []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref(s)}}, {ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref(c)}}}
	}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want []wire.Key
	}{
		{"nothing: the default service account", corev1.PodSpec{}, []wire.Key{cm(rootCA), sa("default")}},
		{"no automounted token", corev1.PodSpec{AutomountServiceAccountToken: new(false)}, []wire.Key{sa("default")}},
		{"deprecated service account", corev1.PodSpec{DeprecatedServiceAccount: "old"}, []wire.Key{cm(rootCA), sa("old")}},
		{"volumes", corev1.PodSpec{Volumes: []corev1.Volume{
			{VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
			{VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("c")}}},
			{VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: ref("ps")}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("pc")}},
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			}}}},
			{VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}}, []wire.Key{cm("c"), cm(rootCA), cm("pc"), sec("ps"), sec("s"), sa("default")}},
		{"env of every container kind", corev1.PodSpec{
			InitContainers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("init")}}}}}},
			Containers: []corev1.Container{{Env: []corev1.EnvVar{
				{Name: "B", Value: "plain"},
				{Name: "C", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("main")}}},
				{Name: "D", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			}, EnvFrom: envFrom("from", "from")}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{EnvFrom: envFrom("debug", "debug")}}},
			ServiceAccountName:  "app",
		}, []wire.Key{cm("debug"), cm("from"), cm(rootCA), cm("main"), sec("debug"), sec("from"), sec("init"), sa("app")}},
		{"image pull secrets, duplicates once", corev1.PodSpec{
			ImagePullSecrets: []corev1.LocalObjectReference{ref("reg"), ref("reg"), ref("")},
			Volumes:          []corev1.Volume{{VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "reg"}}}},
		}, []wire.Key{cm(rootCA), sec("reg"), sa("default")}},
		{"volume plugin secrets; claims are not the view's", corev1.PodSpec{Volumes: []corev1.Volume{
			{VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi"}}}},
			{VolumeSource: corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{SecretRef: &corev1.LocalObjectReference{Name: "rbd"}}}},
			{VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		}}, []wire.Key{cm(rootCA), sec("csi"), sec("rbd"), sa("default")}},
	}
	for _, tt := range tests {
		if got := podRefs("ns", &corev1.Pod{Spec: tt.spec}); !slices.Equal(got, tt.want) {
			t.Errorf("podRefs(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// rootCA is the config map every pod that automounts its token refers to.
const rootCA = podrefs.RootCAConfigMap

func TestDecodePod(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "app", AutomountServiceAccountToken: new(false)}}
	raw := encode(t, pod)
	if pi, ok := decodePod("ns", raw); !ok || pi.node != "n1" || !slices.Equal(pi.refs, []wire.Key{{Resource: wire.ResourceServiceAccounts, Namespace: "ns", Name: "app"}}) {
		t.Errorf("decodePod(pod) = %+v, %v, want n1 with its service account", pi, ok)
	}
	for name, raw := range map[string][]byte{
		"empty":     nil,
		"no prefix": []byte("{\"kind\":\"Pod\"}"),
		"truncated": raw[:len(raw)/2],
		"a secret":  encode(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}),
	} {
		if pi, ok := decodePod("ns", raw); ok || pi != unbound {
			t.Errorf("decodePod(%s) = %+v, %v, want unbound, false", name, pi, ok)
		}
	}
}

// FuzzDecodePod: whatever the stored bytes, decoding a pod does not panic.
func FuzzDecodePod(f *testing.F) {
	f.Add(encode(f, (&podSpec{node: "n1", secrets: []string{"s"}, pull: []string{"r"}}).pod("ns", "p", 1)))
	f.Add([]byte("k8s\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		pi, ok := decodePod("ns", raw)
		if !ok && pi != unbound {
			t.Fatalf("decodePod() = %+v, false", pi)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  func(*Config)
		want string
	}{
		{func(*Config) {}, ""},
		{func(c *Config) { c.HistoryLimit = 0 }, "history limit"},
		{func(c *Config) { c.MaxBatchBytes = -1 }, "max batch bytes"},
		{func(c *Config) { c.MaxBatchChanges = 0 }, "max batch changes"},
	} {
		c := DefaultConfig()
		tt.cfg(&c)
		err := c.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c, err, tt.want)
		}
		func() {
			defer func() {
				if r := recover(); (r == nil) != (tt.want == "") {
					t.Errorf("NewIndex(%+v) panics with %v, want a panic: %v", c, r, tt.want != "")
				}
			}()
			NewIndex(c)
		}()
	}
}

// TestApplyRejects checks that bad input is refused and leaves the index as
// it was.
func TestApplyRejects(t *testing.T) {
	w := newWorld(t, DefaultConfig())
	w.commit(change{key: key("nodes//n1")})
	raw := storedObject(t, key("secrets/default/s"), nil, 1)
	for _, tt := range []struct {
		name   string
		events []Event
		order  bool // wraps ErrOutOfOrder
	}{
		{"revision not after the index's", []Event{{Revision: 1, Key: key("secrets/default/s"), Raw: raw}}, true},
		{"revisions going back", []Event{{Revision: 3, Key: key("secrets/default/s"), Raw: raw}, {Revision: 2, Key: key("secrets/default/t"), Raw: raw}}, true},
		{"put without object", []Event{{Revision: 2, Key: key("secrets/default/s")}}, false},
		{"invalid key", []Event{{Revision: 2, Key: wire.Key{Resource: wire.ResourceSecrets, Namespace: "a/b", Name: "s"}, Raw: raw}}, false},
	} {
		err := w.x.Apply(tt.events)
		if err == nil || errors.Is(err, ErrOutOfOrder) != tt.order {
			t.Errorf("Apply(%s) = %v, want an error (out of order: %v)", tt.name, err, tt.order)
		}
		if rev := w.x.Revision(); rev != 1 {
			t.Errorf("Revision() after Apply(%s) = %d, want 1", tt.name, rev)
		}
	}
	if err := w.x.Apply(nil); err != nil || w.x.Revision() != 1 {
		t.Errorf("Apply(nil) = %v, revision %d", err, w.x.Revision())
	}
	for _, tt := range []struct {
		name string
		rev  int64
		objs []Object
	}{
		{"negative revision", -1, nil},
		{"object after the revision", 5, []Object{{Key: key("secrets/default/s"), Revision: 6, Raw: raw}}},
		{"object at revision 0", 5, []Object{{Key: key("secrets/default/s"), Revision: 0, Raw: raw}}},
		{"object without bytes", 5, []Object{{Key: key("secrets/default/s"), Revision: 3}}},
	} {
		if err := w.x.Reset(tt.rev, tt.objs); err == nil {
			t.Errorf("Reset(%s) = nil, want an error", tt.name)
		}
	}
	if got := w.x.View("n1"); len(got) != 1 {
		t.Errorf("View(n1) after refused input = %v, want the node only", got)
	}
	if _, _, _, err := w.x.Resume("a/b", 0); err == nil {
		t.Errorf("Resume(a/b) = nil, want an error")
	}
	if _, _, _, err := w.x.Resume("n1", -1); !errors.Is(err, ErrNeedInventory) {
		t.Errorf("Resume(n1, -1) = %v, want ErrNeedInventory", err)
	}
}

func TestSessionClose(t *testing.T) {
	w := newWorld(t, DefaultConfig())
	s, _, _, err := w.x.Resume("n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.x.Stats().Sessions; got != 1 {
		t.Errorf("Stats().Sessions = %d, want 1", got)
	}
	s.Close()
	s.Close()
	if _, _, err := s.Next(); !errors.Is(err, ErrClosed) {
		t.Errorf("Next() after Close = %v, want ErrClosed", err)
	}
	if got := w.x.Stats().Sessions; got != 0 {
		t.Errorf("Stats().Sessions after Close = %d, want 0", got)
	}
}

// TestConcurrentSessions runs sessions in their own goroutines, each
// waiting on Changed as the hub would, while the test feeds the index: all
// end with their views.
func TestConcurrentSessions(t *testing.T) {
	const writes = 300
	w := newWorld(t, Config{HistoryLimit: 50, MaxBatchBytes: 4096, MaxBatchChanges: 8})
	g := &gen{rng: newRand(7), w: w}
	final := int64(writes)
	var wg sync.WaitGroup
	edges := make([]*edge, 0, 12)
	for i := range 12 {
		e := w.newEdge(genNodes[i%len(genNodes)])
		s, changes, rev, err := w.x.Resume(e.node, 0)
		if err != nil {
			t.Fatal(err)
		}
		e.s = s
		e.apply(changes, rev)
		edges = append(edges, e)
		wg.Go(func() {
			defer s.Close()
			for {
				ch := w.x.Changed()
				prev := e.rev
				changes, rev, err := s.Next()
				if err != nil {
					t.Errorf("Next() = %v", err)
					return
				}
				e.apply(changes, rev)
				if len(changes) > 0 || rev != prev {
					continue
				}
				if rev == final {
					return
				}
				<-ch
			}
		})
	}
	for range writes {
		g.step()
	}
	wg.Wait()
	for _, e := range edges {
		if d := diffViews(e.holds, w.viewAt(w.rev, e.node)); d != "" {
			t.Errorf("node %s differs from its view:%s", e.node, d)
		}
	}
	if got := w.x.Stats().Sessions; got != 0 {
		t.Errorf("Stats().Sessions = %d, want 0", got)
	}
}
