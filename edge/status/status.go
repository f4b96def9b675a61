// Package status reports the edge node's pods and the node itself to the
// hub through the checkpoint's outbox, as kubelet's status manager and node
// status loop do: each pod's status computed with edge/pods from its spec,
// what the runtime holds and its record, sent when it changed or when the
// hub's copy drifted from it; static pods as mirror pods; the node at each
// connection and every interval. Only edge/agent builds a Reporter.
package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Store is what the Reporter keeps and reads: the outbox it queues
// statuses into, local records of what it sent (which survive restarts),
// and the view, for the hub's copy of the node. The checkpoint is one.
type Store interface {
	Enqueue(kind wire.StatusKind, key wire.Key, object []byte) (seq uint64, err error)
	PutLocal(key string, value []byte) error
	DeleteLocal(key string) error
	Get(k wire.Key) (checkpoint.Object, bool, error)
}

// Recorder makes Events about pods; an *events.Recorder is one.
type Recorder interface {
	Pod(ref runtime.PodRef, pod *corev1.Pod, container, typ, reason, msg string)
}

var _ Store = (*checkpoint.Store)(nil)

// Config configures a Reporter.
type Config struct {
	NodeName string // required
	Site     string
	// Annotations, if not nil, returns the annotations the agent sets on
	// its Node (wire.NodeAnnotations), such as how it routes Services;
	// the node's status is reported again when they change.
	Annotations func() map[string]string
	// NotNodeAddresses are ranges whose addresses are not the node's
	// own, though an interface of its may hold one: the pods' (a
	// bridge's gateway, this node's or, on a machine of several agents,
	// another's) and the services'.
	NotNodeAddresses []netip.Prefix
	// Capacity is what the node offers to pods, reported in its status
	// as its capacity and allocatable when Machine is nil.
	Capacity Capacity
	// Machine, when set, is what the node's status reports of the
	// machine: capacity and allocatable, pressure conditions, images.
	// nil on the fake runtime's nodes, which measure nothing of it.
	Machine Machine
	// RuntimeVersion is reported in the node's info, e.g.
	// "containerd://1.7.24".
	RuntimeVersion string

	Store  Store    // required
	Events Recorder // required
	// MirrorOf returns the mirror pod of a static pod, as the hub is to
	// show it; required.
	MirrorOf func(*corev1.Pod) *corev1.Pod
	// Notify tells the sync client the outbox has news; nil for none.
	Notify func()
	// Kick asks the pod workers for a round, which a pod's held-back
	// report is made from when due; nil makes it from the last round.
	Kick func()
	// Lister, when set, is what Terminated lists the runtime with, for a
	// final status as of then.
	Lister interface {
		List(ctx context.Context) ([]runtime.PodStatus, error)
	}

	// NodeStatusInterval is how often the node reports its status when
	// nothing changed: 5m, kubelet's nodeStatusReportFrequency.
	NodeStatusInterval time.Duration
	// StatusResync is the least time between two reports of a pod's (or
	// the node's) status made again because the hub's copy differed from
	// the agent's: 10s, kubelet's status manager's sync period. The first
	// is made at once.
	StatusResync time.Duration

	Logger *slog.Logger     // nil discards
	Clock  func() time.Time // nil for the wall clock
}

// DefaultConfig returns the defaults above; the required fields are left
// empty.
func DefaultConfig() Config {
	return Config{NodeStatusInterval: 5 * time.Minute, StatusResync: 10 * time.Second}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("node name is required")
	case c.Store == nil || c.Events == nil || c.MirrorOf == nil:
		return errors.New("store, event recorder and mirror function are required")
	case c.NodeStatusInterval <= 0 || c.StatusResync <= 0:
		return errors.New("node status interval and status resync must be positive")
	}
	return nil
}

// Round is what one round of the pod workers saw and decided: the pods
// bound to the node, what the runtime held, and each pod's record. The
// Reporter computes the statuses from it. Nobody modifies a Round once
// handed over: the pods are shared, and the maps and slices are the
// Reporter's.
type Round struct {
	Desired []*corev1.Pod
	Static  map[string]*corev1.Pod // the static pods of Desired, by UID
	Actual  []runtime.PodStatus
	Records map[string]pods.Record // by pod UID
	// Probed is what the pods' probes found, by pod UID; nil when no
	// prober runs on the node (see pods.Probed).
	Probed map[string]*pods.Probed
	Now    time.Time
}

// probed returns what the probes of pod uid found, as pods.Status takes
// it.
func (rd *Round) probed(uid string) *pods.Probed {
	if rd.Probed == nil {
		return nil
	}
	if p := rd.Probed[uid]; p != nil {
		return p
	}
	return &pods.Probed{}
}

// Reporter reports statuses. Build it with New, read what it sent before
// with Load, and run it with Run; the other methods may be called from
// any goroutine.
type Reporter struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	wakeups chan struct{} // capacity 1: Run is to look at what is due

	mu       sync.Mutex
	reported map[string]sentStatus   // the last status sent, by pod UID
	resync   map[string]*pods.Resync // what the hub has not shown back of them, by pod UID
	mirrored map[string]string       // static pod UID -> mirror key sent; on disk too

	addrs atomic.Pointer[[]corev1.NodeAddress] // the node's addresses, looked up with each node status

	// loopMu is held while reporting; what follows is its own.
	loopMu     sync.Mutex
	next       time.Time    // when the node's next report is due, for Run
	podWake    time.Time    // when a pod's held-back report is due, or zero
	node       *corev1.Node // the last node status sent
	nodeSent   time.Time
	nodeResent time.Time // when the hub's copy of the node last led to a report
	computed   map[string]statusInputs
	last       Round // the latest round reported

	// nodeDue is set when the node's status is to be reported at once,
	// whenever the last was: a session with the hub began. nodeViewed is
	// set when the hub's copy of the node in the view changed since the
	// loop last compared it with the last report.
	nodeDue    atomic.Bool
	nodeViewed atomic.Bool
	// observed is set once a round was reported since the start: the
	// statuses then say what this agent saw, not what an earlier one
	// reported.
	observed atomic.Bool
}

// New checks cfg and returns a Reporter; it starts nothing.
func New(cfg Config) (*Reporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("status config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Notify == nil {
		cfg.Notify = func() {}
	}
	r := &Reporter{
		cfg: cfg, log: cfg.Logger, now: cfg.Clock,
		wakeups:  make(chan struct{}, 1),
		reported: map[string]sentStatus{},
		resync:   map[string]*pods.Resync{},
		mirrored: map[string]string{},
		computed: map[string]statusInputs{},
	}
	r.nodeDue.Store(true) // at the first round
	return r, nil
}

// Local record keys.
func statusKey(uid string) string { return "status/" + uid }
func mirrorKey(uid string) string { return "mirror/" + uid }

// Load reads what was reported before a restart, from list (the
// checkpoint's local records under a prefix): the pods' last statuses and
// the mirrors sent, so that a static pod whose manifest goes away after a
// restart still has its mirror removed. Call it before Run.
func (r *Reporter) Load(list func(prefix string) (map[string][]byte, error)) error {
	sts, err := list("status/")
	if err != nil {
		return fmt.Errorf("read pod statuses: %w", err)
	}
	for k, v := range sts {
		var s corev1.PodStatus
		if err := json.Unmarshal(v, &s); err != nil {
			continue
		}
		w, err := s.Marshal()
		if err != nil {
			continue
		}
		r.reported[k[len("status/"):]] = sentStatus{s, w}
	}
	ms, err := list("mirror/")
	if err != nil {
		return fmt.Errorf("read mirror pods: %w", err)
	}
	for k, v := range ms {
		r.mirrored[k[len("mirror/"):]] = string(v)
	}
	return nil
}

// Mirrored returns the UIDs of the static pods whose mirrors were sent.
// The caller owns the map.
func (r *Reporter) Mirrored() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(r.mirrored))
	for uid := range r.mirrored {
		out[uid] = true
	}
	return out
}

// Observe reports the round: the pods whose status changed, or whose hub
// copy drifted and is due a report again, and the node if its report is
// due. It is called at the end of each round of the pod workers, in their
// goroutine, so that every state they saw is reported (a back-off that a
// later round ended included), and returns once the statuses are queued.
func (r *Reporter) Observe(rd Round) {
	r.loopMu.Lock()
	defer r.loopMu.Unlock()
	r.last = rd
	r.reportLocked(rd, rd.Now)
	r.observed.Store(true)
}

// PodAddrs returns, for each IP of the node's pods as last reported,
// whether the pod is ready (its Ready condition True): for the service
// proxy, which drops the node's own endpoints that do not serve at once,
// while the hub is away too. ok is false until the first round since the
// start was reported. Pods on the host's network are left out: their
// address is the node's, which other pods share.
func (r *Reporter) PodAddrs() (ready map[netip.Addr]bool, ok bool) {
	if !r.observed.Load() {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ready = make(map[netip.Addr]bool, len(r.reported))
	for _, s := range r.reported {
		st := &s.status
		if st.HostIP != "" && st.PodIP == st.HostIP {
			continue
		}
		isReady := false
		for _, c := range st.Conditions {
			if c.Type == corev1.PodReady {
				isReady = c.Status == corev1.ConditionTrue
			}
		}
		for _, ip := range st.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				ready[a] = ready[a] || isReady
			}
		}
		if a, err := netip.ParseAddr(st.PodIP); err == nil {
			ready[a] = ready[a] || isReady
		}
	}
	return ready, true
}

// PodsReady returns, for each of the node's pods as last reported, by
// UID, whether it is ready (its Ready condition True): for the site mesh,
// which tells the node's peers, so that they drop its pods that do not
// serve while the hub is away. ok is false until the first round since
// the start was reported.
func (r *Reporter) PodsReady() (ready map[string]bool, ok bool) {
	if !r.observed.Load() {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ready = make(map[string]bool, len(r.reported))
	for uid, s := range r.reported {
		isReady := false
		for _, c := range s.status.Conditions {
			if c.Type == corev1.PodReady {
				isReady = c.Status == corev1.ConditionTrue
			}
		}
		ready[uid] = isReady
	}
	return ready, true
}

// reportLocked reports rd's pods and the node as of now, and arms the
// timer of Run for the next report due. r.loopMu is held.
func (r *Reporter) reportLocked(rd Round, now time.Time) {
	r.podWake = r.reportPods(rd, now)
	r.next = r.reportNode(now)
	r.cfg.Notify()
	r.wake()
}

// NodeDue has the node's status reported at once: a session with the hub
// began, and the hub may have set its conditions Unknown meanwhile, or
// what the Machine reports changed (a pressure condition came or went).
func (r *Reporter) NodeDue() {
	r.nodeDue.Store(true)
	r.wake()
}

// NodeViewed says the hub's copy of the node in the view changed.
func (r *Reporter) NodeViewed() {
	r.nodeViewed.Store(true)
	r.wake()
}

func (r *Reporter) wake() {
	select {
	case r.wakeups <- struct{}{}:
	default:
	}
}

// Run reports, until ctx ends, what comes due between the rounds of the
// pod workers: the node's status at each connection to the hub, at each
// interval and when the hub's copy drifted, and the held-back report of a
// pod whose hub copy drifted, once StatusResync allows, from the last
// round's state.
func (r *Reporter) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.loopMu.Lock()
		next, podWake := r.next, r.podWake
		r.loopMu.Unlock()
		if !podWake.IsZero() && (next.IsZero() || podWake.Before(next)) {
			next = podWake
		}
		if !next.IsZero() {
			timer.Reset(max(next.Sub(r.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wakeups:
			if !r.nodeDue.Load() && !r.nodeViewed.Load() {
				continue // a round re-armed the timer
			}
		case <-timer.C:
		}
		now := r.now()
		r.loopMu.Lock()
		if r.last.Now.IsZero() { // the first report waits for the first round
			r.loopMu.Unlock()
			continue
		}
		if !r.podWake.IsZero() && !now.Before(r.podWake) {
			// A pod's held-back report is due: from a new round, with the
			// hub's copy as the view has it now, not the last round's.
			r.podWake = time.Time{}
			if r.cfg.Kick != nil {
				r.cfg.Kick()
			} else {
				r.podWake = r.reportPods(r.last, now)
			}
		}
		r.next = r.reportNode(now)
		r.cfg.Notify()
		r.loopMu.Unlock()
	}
}

// reportPods reports the pods of rd whose status changed, or whose hub
// copy drifted and is due a report again; it returns when a report held
// back is due, or the zero time.
func (r *Reporter) reportPods(rd Round, now time.Time) (wake time.Time) {
	byActual := make(map[string]*runtime.PodStatus, len(rd.Actual))
	for i := range rd.Actual {
		byActual[rd.Actual[i].Pod.UID] = &rd.Actual[i]
	}
	hostIP := r.HostIP()
	desired := make(map[string]bool, len(rd.Desired))
	for _, p := range rd.Desired {
		desired[string(p.UID)] = true
	}
	for uid := range r.computed {
		if !desired[uid] {
			delete(r.computed, uid)
		}
	}
	for _, p := range rd.Desired {
		uid := string(p.UID)
		rec := rd.Records[uid]
		r.mu.Lock()
		last, had := r.reported[uid]
		r.mu.Unlock()
		probed := rd.probed(uid)
		inputs := statusInputs{pod: p, act: byActual[uid], rec: rec, probed: probed, hostIP: hostIP}
		if had && r.computed[uid].same(inputs, last.wire) {
			continue // the status would be the one last reported
		}
		isStatic := rd.Static[uid] != nil
		in := p
		if had {
			// Status reads its pod and keeps none of it: a shallow copy
			// does. It starts from the last report, with what others
			// own of the status as the hub has it now; a static pod's
			// hub copy is its mirror, which the agent alone writes.
			withLast := *p
			withLast.Status = last.status
			if !isStatic {
				withLast.Status = pods.MergeHub(&last.status, &p.Status)
			}
			in = &withLast
		}
		st := pods.Status(in, byActual[uid], rec, probed, now)
		fillIPs(&st, hostIP, p.Spec.HostNetwork)
		wireSt, err := st.Marshal()
		if err != nil {
			r.log.Warn("encode pod status", "pod", p.Namespace+"/"+p.Name, "err", err)
			continue
		}
		r.computed[uid] = inputs.keep(wireSt)
		if had && bytes.Equal(wireSt, last.wire) {
			if isStatic || !r.resyncDue(p, &last.status, now, &wake) {
				continue
			}
			r.log.Info("pod status on the hub differs from the agent's; reporting it again", "pod", p.Namespace+"/"+p.Name)
		}
		if had {
			r.backOffEvents(p, &last.status, &st)
		} else {
			r.backOffEvents(p, nil, &st)
		}
		r.report(p, sentStatus{st, wireSt}, isStatic)
	}
	return wake
}

// resyncDue reports whether pod's status, last reported as last and
// computed the same again, is to be reported again because the hub's copy
// (the pod's) differs; if that is held back, it forgets the computation,
// so that the next round checks again, and sets *wake to when it may be
// made if that is sooner.
func (r *Reporter) resyncDue(pod *corev1.Pod, last *corev1.PodStatus, now time.Time, wake *time.Time) bool {
	uid := string(pod.UID)
	r.mu.Lock()
	rs := r.resync[uid]
	if rs == nil {
		rs = &pods.Resync{}
		r.resync[uid] = rs
	}
	resend, retry := rs.Check(&pod.Status, last, now, r.cfg.StatusResync)
	r.mu.Unlock()
	if !retry.IsZero() {
		delete(r.computed, uid)
		if wake.IsZero() || retry.Before(*wake) {
			*wake = retry
		}
	}
	return resend
}

// Terminated sends the final status of pod, whose record is rec, as the
// runtime holds it now, then tells the hub it may remove the pod. It is
// the ConfirmTerminated action of the pod's worker.
func (r *Reporter) Terminated(ctx context.Context, pod *corev1.Pod, rec pods.Record) error {
	var ps *runtime.PodStatus
	if r.cfg.Lister != nil {
		actual, err := r.cfg.Lister.List(ctx)
		if err != nil {
			return err
		}
		for i := range actual {
			if actual[i].Pod.UID == string(pod.UID) {
				ps = &actual[i]
			}
		}
	}
	st := pods.Status(pod, ps, rec, nil, r.now())
	fillIPs(&st, r.HostIP(), pod.Spec.HostNetwork)
	w, err := st.Marshal()
	if err != nil {
		return err
	}
	r.report(pod, sentStatus{st, w}, false)
	raw, err := objects.Encode(podForHub(pod, st))
	if err != nil {
		return err
	}
	if _, err := r.cfg.Store.Enqueue(wire.KindPodTerminated, podKey(pod), raw); err != nil {
		return err
	}
	r.cfg.Notify()
	return nil
}

// Forget forgets what was reported of a pod that is gone, and the mirror
// of a static pod, if one was sent.
func (r *Reporter) Forget(uid string) {
	r.mu.Lock()
	delete(r.reported, uid)
	delete(r.resync, uid)
	r.mu.Unlock()
	if err := r.cfg.Store.DeleteLocal(statusKey(uid)); err != nil {
		r.log.Warn("forget pod status", "uid", uid, "err", err)
	}
	r.forgetMirror(uid)
}

func podKey(p *corev1.Pod) wire.Key {
	return wire.Key{Resource: wire.ResourcePods, Namespace: p.Namespace, Name: p.Name}
}

// podForHub returns what is sent of a pod with status st: its identity and
// the status.
func podForHub(p *corev1.Pod, st corev1.PodStatus) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Status:     st,
	}
}

// sentStatus is a pod status as reported, with its protobuf encoding: two
// statuses are the same to the hub when their encodings are, which drop
// the times' fractions of a second as the hub's storage does.
type sentStatus struct {
	status corev1.PodStatus
	wire   []byte
}

// report queues a pod's status for the hub and remembers it.
func (r *Reporter) report(p *corev1.Pod, sent sentStatus, static bool) {
	uid := string(p.UID)
	st := sent.status
	var err error
	if static {
		m := r.cfg.MirrorOf(p)
		m.Status = st
		var raw []byte
		if raw, err = objects.Encode(m); err == nil {
			_, err = r.cfg.Store.Enqueue(wire.KindMirrorPod, podKey(p), raw)
		}
		if err == nil {
			key := podKey(p).String()
			r.mu.Lock()
			known := r.mirrored[uid] == key
			r.mirrored[uid] = key
			r.mu.Unlock()
			if !known {
				if perr := r.cfg.Store.PutLocal(mirrorKey(uid), []byte(key)); perr != nil {
					r.log.Warn("record mirror pod", "pod", key, "err", perr)
				}
			}
		}
	} else {
		var raw []byte
		if raw, err = objects.Encode(podForHub(p, st)); err == nil {
			_, err = r.cfg.Store.Enqueue(wire.KindPodStatus, podKey(p), raw)
		}
	}
	if err != nil {
		r.log.Warn("queue pod status", "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	r.mu.Lock()
	r.reported[uid] = sent
	if !static {
		rs := r.resync[uid]
		if rs == nil {
			rs = &pods.Resync{}
			r.resync[uid] = rs
		}
		rs.Sent(&sent.status, &p.Status)
	}
	r.mu.Unlock()
	// The status on disk is where the next round after a restart starts
	// from; one not kept is computed and sent again then, no harm done.
	if b, err := json.Marshal(st); err == nil {
		if err := r.cfg.Store.PutLocal(statusKey(uid), b); err != nil {
			r.log.Warn("record pod status", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}

// forgetMirror forgets the mirror of a static pod that is gone, if one
// was sent, and queues its removal, unless the static pod of a changed
// manifest, the same pod to the hub, has sent its own since: the hub
// replaces a mirror by itself, and the removal would take the new one.
func (r *Reporter) forgetMirror(uid string) {
	r.mu.Lock()
	key, ok := r.mirrored[uid]
	delete(r.mirrored, uid)
	replaced := false
	for _, k := range r.mirrored {
		replaced = replaced || k == key
	}
	r.mu.Unlock()
	if !ok {
		return
	}
	if !replaced {
		if k, err := wire.ParseKey(key); err == nil {
			if _, err := r.cfg.Store.Enqueue(wire.KindMirrorPodDelete, k, nil); err != nil {
				r.log.Warn("queue mirror pod removal", "pod", key, "err", err)
			}
		}
	}
	if err := r.cfg.Store.DeleteLocal(mirrorKey(uid)); err != nil {
		r.log.Warn("forget mirror pod", "pod", key, "err", err)
	}
}

// fillIPs sets the host IPs to the node's internal IP ip, which the
// runtime does not know, and so the pod IPs of a pod of the host's
// network.
func fillIPs(st *corev1.PodStatus, ip string, hostNetwork bool) {
	if ip == "" {
		return
	}
	st.HostIP = ip
	st.HostIPs = []corev1.HostIP{{IP: ip}}
	// A pod of the host's network has the host's IP, as kubelet reports
	// it.
	if hostNetwork && st.PodIP == "" {
		st.PodIP = ip
		st.PodIPs = []corev1.PodIP{{IP: ip}}
	}
}

// HostIP returns the node's internal IP, "" if it has none.
func (r *Reporter) HostIP() string {
	ip := ""
	for _, addr := range r.addresses() {
		if addr.Type == corev1.NodeInternalIP {
			ip = addr.Address
		}
	}
	return ip
}

// addresses returns the node's addresses as last looked up: a lookup lists
// the interfaces over netlink, too dear for every pod of every round.
func (r *Reporter) addresses() []corev1.NodeAddress {
	if p := r.addrs.Load(); p != nil {
		return *p
	}
	addrs := hostAddresses(r.cfg.NodeName, r.cfg.NotNodeAddresses)
	r.addrs.Store(&addrs)
	return addrs
}

// statusInputs is what a round computed a pod's status from. pods.Status
// reads the time only for what changed since the status it starts from
// (the last reported), so the same inputs give the same status again: a
// round skips the pods whose inputs are unchanged, most of them, rather
// than compute and encode every status to find it the same.
type statusInputs struct {
	pod    *corev1.Pod // shared and never modified, so the same pointer is the same pod
	act    *runtime.PodStatus
	rec    pods.Record
	probed *pods.Probed
	hostIP string
	// from is the encoding of the status computed, which the pod's last
	// report must be for the next computation to start from it again.
	from []byte
}

// keep returns in as remembered, with the status computed from it: what it
// points into that a later round changes is copied.
func (in statusInputs) keep(computed []byte) statusInputs {
	if in.act != nil {
		act := in.act.Clone()
		in.act = &act
	}
	in.rec = in.rec.Clone()
	if in.probed != nil {
		in.probed = &pods.Probed{Results: maps.Clone(in.probed.Results)}
	}
	in.from = computed
	return in
}

// same reports whether a status computed from in, starting from the last
// report (encoded as last), is the one computed from c.
func (c statusInputs) same(in statusInputs, last []byte) bool {
	switch {
	case c.pod == nil || c.pod != in.pod || c.hostIP != in.hostIP || !bytes.Equal(c.from, last):
		return false
	case (c.act == nil) != (in.act == nil) || c.act != nil && !c.act.Equal(in.act):
		return false
	case (c.probed == nil) != (in.probed == nil) || c.probed != nil && !maps.Equal(c.probed.Results, in.probed.Results):
		return false
	}
	return c.rec.Equal(in.rec)
}
