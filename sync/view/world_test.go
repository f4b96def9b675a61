package view

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// The tests encode objects as the hub stores them: Kubernetes protobuf,
// without resourceVersion.
var (
	testScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(corev1.AddToScheme(s))
		utilruntime.Must(discoveryv1.AddToScheme(s))
		return s
	}()
	testCodec = protobuf.NewSerializer(testScheme, testScheme)
)

func encode(tb testing.TB, obj runtime.Object) []byte {
	tb.Helper()
	gvks, _, err := testScheme.ObjectKinds(obj)
	if err != nil {
		tb.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	var buf bytes.Buffer
	if err := testCodec.Encode(obj, &buf); err != nil {
		tb.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("k8s\x00")) {
		tb.Fatalf("encoded %T = %q..., want the k8s\\x00 prefix", obj, buf.Bytes()[:8])
	}
	return buf.Bytes()
}

// podSpec describes a test pod: the node it is bound to and what it
// references, by where the reference is.
type podSpec struct {
	node           string
	secrets        []string // volumes
	configMaps     []string
	projSecrets    []string // projected volume sources
	projConfigMaps []string
	envSecrets     []string // env valueFrom
	envConfigMaps  []string
	fromSecrets    []string // envFrom
	fromConfigMaps []string
	pull           []string // imagePullSecrets
	sa             string
	garbage        bool // stored as bytes that do not decode
}

// refs returns the keys p references in ns, computed independently of
// podRefs.
func (p *podSpec) refs(ns string) map[wire.Key]bool {
	refs := make(map[wire.Key]bool)
	for _, l := range [][]string{p.secrets, p.projSecrets, p.envSecrets, p.fromSecrets, p.pull} {
		for _, n := range l {
			refs[wire.Key{Resource: wire.ResourceSecrets, Namespace: ns, Name: n}] = true
		}
	}
	for _, l := range [][]string{p.configMaps, p.projConfigMaps, p.envConfigMaps, p.fromConfigMaps} {
		for _, n := range l {
			refs[wire.Key{Resource: wire.ResourceConfigMaps, Namespace: ns, Name: n}] = true
		}
	}
	sa := p.sa
	if sa == "" {
		sa = "default"
	}
	refs[wire.Key{Resource: wire.ResourceServiceAccounts, Namespace: ns, Name: sa}] = true
	return refs
}

func (p *podSpec) pod(ns, name string, gen int) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"gen": strconv.Itoa(gen)}},
		Spec: corev1.PodSpec{
			NodeName:           p.node,
			ServiceAccountName: p.sa,
			Containers:         []corev1.Container{{Name: "main", Image: "registry.local/app:1"}},
		},
	}
	c := &pod.Spec.Containers[0]
	for _, n := range p.secrets {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "s-" + n, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n}}})
	}
	for _, n := range p.configMaps {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "c-" + n, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}}})
	}
	if len(p.projSecrets)+len(p.projConfigMaps) > 0 {
		var srcs []corev1.VolumeProjection
		for _, n := range p.projSecrets {
			srcs = append(srcs, corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
		}
		for _, n := range p.projConfigMaps {
			srcs = append(srcs, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: srcs}}})
	}
	for _, n := range p.envSecrets {
		c.Env = append(c.Env, corev1.EnvVar{Name: "S_" + n, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: n}, Key: "k"}}})
	}
	for _, n := range p.envConfigMaps {
		c.Env = append(c.Env, corev1.EnvVar{Name: "C_" + n, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: n}, Key: "k"}}})
	}
	for _, n := range p.fromSecrets {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	for _, n := range p.fromConfigMaps {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	for _, n := range p.pull {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: n})
	}
	return pod
}

// nodeSpec describes a test Node: its site label ("" for none).
type nodeSpec struct {
	site    string
	garbage bool // stored as bytes that do not decode
}

// storedNode returns the stored form of Node name, at generation gen.
func storedNode(tb testing.TB, name string, spec *nodeSpec, gen int) []byte {
	tb.Helper()
	if spec.garbage {
		return []byte("k8s\x00\xff\xff not a node " + strconv.Itoa(gen))
	}
	meta := metav1.ObjectMeta{Name: name, Labels: map[string]string{"gen": strconv.Itoa(gen)}}
	if spec.site != "" {
		meta.Labels[wire.SiteLabel] = spec.site
	}
	return encode(tb, &corev1.Node{ObjectMeta: meta})
}

// storedObject returns the stored form of the object of key, at generation gen;
// spec is for pods only. A Node has no site.
func storedObject(tb testing.TB, key wire.Key, spec *podSpec, gen int) []byte {
	tb.Helper()
	meta := metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"gen": strconv.Itoa(gen)}}
	var obj runtime.Object
	switch key.Resource {
	case wire.ResourcePods:
		if spec.garbage {
			return []byte("k8s\x00\xff\xff not a pod " + strconv.Itoa(gen))
		}
		obj = spec.pod(key.Namespace, key.Name, gen)
	case wire.ResourceNodes:
		obj = &corev1.Node{ObjectMeta: meta}
	case wire.ResourceConfigMaps:
		obj = &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "v"}}
	case wire.ResourceSecrets:
		obj = &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"k": []byte("v")}}
	case wire.ResourceServiceAccounts:
		obj = &corev1.ServiceAccount{ObjectMeta: meta}
	case wire.ResourceServices:
		obj = &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10"}}
	case wire.ResourceEndpointSlices:
		obj = &discoveryv1.EndpointSlice{ObjectMeta: meta, AddressType: discoveryv1.AddressTypeIPv4}
	default:
		obj = &corev1.Event{ObjectMeta: meta, Reason: "Test"}
	}
	return encode(tb, obj)
}

// worldObj is one object of a world's store.
type worldObj struct {
	rev  int64
	raw  []byte
	pod  *podSpec  // pods only
	node *nodeSpec // Nodes only
}

// site returns the site of a Node, "" for none.
func (o worldObj) site() string {
	if o.node == nil || o.node.garbage {
		return ""
	}
	return o.node.site
}

// world is a store in miniature that feeds an Index and remembers every
// event, so that any past state can be rebuilt from scratch.
type world struct {
	tb   testing.TB
	x    *Index
	rev  int64
	gen  int
	objs map[wire.Key]worldObj
	log  []Event
	spec map[int64]map[wire.Key]*podSpec  // the pods' specs by revision
	node map[int64]map[wire.Key]*nodeSpec // the Nodes' specs by revision
	st   *stored
	// What edges did of the puts without their objects, over all.
	loads, founds, drops atomic.Int64
	// resetRaw: reset gives Reset the bytes of every object, or (false)
	// none of the OnDemand resources', as the hub does.
	resetRaw bool
	// moves counts the changes of Nodes by what they did to sites (see
	// siteMove), to check that the tests take each path.
	moves map[string]int
}

func newWorld(tb testing.TB, cfg Config) *world {
	return &world{tb: tb, x: NewIndex(cfg), objs: map[wire.Key]worldObj{}, spec: map[int64]map[wire.Key]*podSpec{},
		node: map[int64]map[wire.Key]*nodeSpec{}, st: newStored(), resetRaw: true, moves: map[string]int{}}
}

// stored is the world's store as edges read it: every version of every
// key, to check what a node is sent, and the latest, which is all a
// compacted store still has of an object that changed. It is safe for
// concurrent use: edges read it while the world changes.
type stored struct {
	mu       sync.Mutex
	versions map[wire.Key]map[int64][]byte
	latest   map[wire.Key]int64 // 0 once deleted
}

func newStored() *stored {
	return &stored{versions: map[wire.Key]map[int64][]byte{}, latest: map[wire.Key]int64{}}
}

func (st *stored) put(key wire.Key, rev int64, raw []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.versions[key] == nil {
		st.versions[key] = map[int64][]byte{}
	}
	st.versions[key][rev] = raw
	st.latest[key] = rev
}

func (st *stored) del(key wire.Key) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.latest[key] = 0
}

// ever reports whether key was ever written.
func (st *stored) ever(key wire.Key) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.versions[key] != nil
}

// version returns key at rev, as it was written.
func (st *stored) version(key wire.Key, rev int64) ([]byte, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	raw, ok := st.versions[key][rev]
	return raw, ok
}

// read returns key at rev as a compacted store does: only if rev is its
// latest version. The caller owns the bytes.
func (st *stored) read(key wire.Key, rev int64) ([]byte, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.latest[key] != rev {
		return nil, false
	}
	return bytes.Clone(st.versions[key][rev]), true
}

// change is one change of a world transaction: a put of key (with spec for
// a pod, node for a Node: none for no site) or its deletion.
type change struct {
	key     wire.Key
	spec    *podSpec
	node    *nodeSpec
	deleted bool
}

// siteMove names what a change of a Node from prev to next (had, has:
// whether they exist) does to sites, "" if nothing; before, whether the
// Node existed before prev.
func siteMove(prev, next worldObj, had, has, before bool) string {
	a, b := prev.site(), next.site()
	switch {
	case a == b && (a == "" || had == has):
		return ""
	case !had && before:
		return "re-create in a site"
	case !had:
		return "create in a site"
	case !has:
		return "delete from a site"
	case a == "":
		return "join a site"
	case b == "":
		return "leave a site"
	}
	return "move between sites"
}

// commit writes changes at the next revision and applies them to the
// index.
func (w *world) commit(changes ...change) {
	w.tb.Helper()
	w.rev++
	var events []Event
	for _, c := range changes {
		ev := Event{Revision: w.rev, Key: c.key, Deleted: c.deleted}
		prev, had := w.objs[c.key]
		before := w.st.ever(c.key)
		if c.deleted {
			delete(w.objs, c.key)
			w.st.del(c.key)
		} else {
			w.gen++
			spec := c.spec
			if c.key.Resource == wire.ResourcePods && spec == nil {
				spec = &podSpec{}
			}
			node := c.node
			if c.key.Resource == wire.ResourceNodes && node == nil {
				node = &nodeSpec{}
			}
			if node != nil {
				ev.Raw = storedNode(w.tb, c.key.Name, node, w.gen)
			} else {
				ev.Raw = storedObject(w.tb, c.key, spec, w.gen)
			}
			w.objs[c.key] = worldObj{rev: w.rev, raw: ev.Raw, pod: spec, node: node}
			w.st.put(c.key, w.rev, ev.Raw)
			if spec != nil {
				if w.spec[w.rev] == nil {
					w.spec[w.rev] = map[wire.Key]*podSpec{}
				}
				w.spec[w.rev][c.key] = spec
			}
			if node != nil {
				if w.node[w.rev] == nil {
					w.node[w.rev] = map[wire.Key]*nodeSpec{}
				}
				w.node[w.rev][c.key] = node
			}
		}
		if c.key.Resource == wire.ResourceNodes {
			next, has := w.objs[c.key]
			if m := siteMove(prev, next, had, has, before); m != "" {
				w.moves[m]++
			}
		}
		events = append(events, ev)
	}
	w.log = append(w.log, events...)
	if err := w.x.Apply(events); err != nil {
		w.tb.Fatalf("Apply(revision %d) = %v", w.rev, err)
	}
}

// reset resets the index to the world as it is now.
func (w *world) reset() {
	w.tb.Helper()
	var objs []Object
	for k, o := range w.objs {
		obj := Object{Key: k, Revision: o.rev, Raw: o.raw}
		if !w.resetRaw && OnDemand(k.Resource) && !Shared(k) {
			obj.Raw, obj.Size = nil, len(o.raw)
		}
		objs = append(objs, obj)
	}
	if err := w.x.Reset(w.rev, objs); err != nil {
		w.tb.Fatalf("Reset(%d) = %v", w.rev, err)
	}
}

// at rebuilds the store at rev from the log.
func (w *world) at(rev int64) map[wire.Key]worldObj {
	objs := map[wire.Key]worldObj{}
	for _, ev := range w.log {
		if ev.Revision > rev {
			break
		}
		if ev.Deleted {
			delete(objs, ev.Key)
			continue
		}
		objs[ev.Key] = worldObj{rev: ev.Revision, raw: ev.Raw, pod: w.spec[ev.Revision][ev.Key], node: w.node[ev.Revision][ev.Key]}
	}
	return objs
}

// viewOf computes the view of node in objs from scratch: its Node and
// those of its site (the same non-empty label as its own Node's), its pods
// and the objects they reference, services and endpoint slices.
func viewOf(objs map[wire.Key]worldObj, node string) map[wire.Key]int64 {
	v := map[wire.Key]int64{}
	site := ""
	if o, ok := objs[wire.Key{Resource: wire.ResourceNodes, Name: node}]; ok {
		site = o.site()
	}
	for k, o := range objs {
		if Shared(k) {
			v[k] = o.rev
			continue
		}
		switch k.Resource {
		case wire.ResourceNodes:
			if k.Name == node || site != "" && o.site() == site {
				v[k] = o.rev
			}
		case wire.ResourceServices, wire.ResourceEndpointSlices:
			v[k] = o.rev
		case wire.ResourcePods:
			if o.pod.garbage || o.pod.node != node {
				continue
			}
			v[k] = o.rev
			for ref := range o.pod.refs(k.Namespace) {
				if r, ok := objs[ref]; ok {
					v[ref] = r.rev
				}
			}
		}
	}
	return v
}

// viewAt is the view of node at rev, rebuilt from scratch.
func (w *world) viewAt(rev int64, node string) map[wire.Key]int64 {
	return viewOf(w.at(rev), node)
}

// edge plays a node as sync/client does, with the hub's I/O shell that
// reads the objects of puts that come without them: what it holds, and
// the revision its view is complete through.
type edge struct {
	w     *world
	node  string
	s     *Session
	rev   int64
	holds map[wire.Key]int64
	// midStep: the last result applied was a part that more follow.
	// dirty: the node may hold part of a step beyond its view at rev.
	midStep, dirty bool
	// What the shell did of the puts without their object: read them
	// from the store, found them in the index, or dropped them, the
	// store having a newer version.
	loaded, found, dropped []string
}

func (w *world) newEdge(node string) *edge {
	return &edge{w: w, node: node, holds: map[wire.Key]int64{}}
}

// apply applies one result as the node would: a result of revision 0 is
// a part of a step that more parts follow, after which the node keeps its
// revision.
func (e *edge) apply(changes []Change, rev int64) {
	e.applyPrefix(changes, len(changes))
	if rev != 0 {
		e.rev = rev
	}
	e.midStep = rev == 0
}

// applyPrefix applies the first n changes only, as a node that lost the
// connection in the middle of a batch's frames: it keeps its revision.
// It checks that each object sent is the one stored at its revision.
func (e *edge) applyPrefix(changes []Change, n int) {
	for _, c := range changes[:n] {
		switch c.Op {
		case wire.OpPut:
			raw, ok := e.object(c)
			if !ok {
				continue
			}
			if want, _ := e.w.st.version(c.Key, c.Revision); !bytes.Equal(raw, want) || c.Size != len(want) {
				e.w.tb.Errorf("node %s sent %s@%d: %d bytes, size %d; want the %d stored", e.node, c.Key, c.Revision, len(raw), c.Size, len(want))
			}
			e.holds[c.Key] = c.Revision
		case wire.OpDelete:
			delete(e.holds, c.Key)
		}
	}
}

// object returns the object of put c as the hub's shell sends it, and
// false if the shell drops c.
func (e *edge) object(c Change) ([]byte, bool) {
	if c.Object != nil {
		return c.Object, true
	}
	what := fmt.Sprintf("%s@%d", c.Key, c.Revision)
	if !OnDemand(c.Key.Resource) {
		e.w.tb.Errorf("node %s: put of %s without its object", e.node, what)
	}
	if raw, ok := e.w.x.Raw(c.Key, c.Revision); ok {
		e.found = append(e.found, what)
		e.w.founds.Add(1)
		return raw, true
	}
	raw, ok := e.w.st.read(c.Key, c.Revision)
	if !ok {
		e.dropped = append(e.dropped, what)
		e.w.drops.Add(1)
		return nil, false
	}
	e.loaded = append(e.loaded, what)
	e.w.loads.Add(1)
	e.w.x.Fill(c.Key, c.Revision, raw)
	return raw, true
}

func (e *edge) inventory() []wire.InventoryEntry {
	var inv []wire.InventoryEntry
	for k, rev := range e.holds {
		inv = append(inv, wire.InventoryEntry{Key: k, Revision: rev})
	}
	slices.SortFunc(inv, func(a, b wire.InventoryEntry) int { return compareKeys(a.Key, b.Key) })
	return inv
}

// diffViews describes how got differs from want, "" if not at all.
func diffViews(got, want map[wire.Key]int64) string {
	var b strings.Builder
	keys := slices.SortedFunc(maps.Keys(got), compareKeys)
	for _, k := range keys {
		if r, ok := want[k]; !ok {
			fmt.Fprintf(&b, " extra %s@%d;", k, got[k])
		} else if r != got[k] {
			fmt.Fprintf(&b, " %s@%d, want @%d;", k, got[k], r)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(want), compareKeys) {
		if _, ok := got[k]; !ok {
			fmt.Fprintf(&b, " missing %s@%d;", k, want[k])
		}
	}
	return b.String()
}

func inventoryMap(inv []wire.InventoryEntry) map[wire.Key]int64 {
	m := map[wire.Key]int64{}
	for _, e := range inv {
		m[e.Key] = e.Revision
	}
	return m
}

func formatChanges(changes []Change) string {
	var parts []string
	for _, c := range changes {
		op := "put"
		if c.Op == wire.OpDelete {
			op = "del"
		}
		parts = append(parts, fmt.Sprintf("%s %s@%d", op, c.Key, c.Revision))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func key(s string) wire.Key {
	k, err := wire.ParseKey(s)
	if err != nil {
		panic(err)
	}
	return k
}
