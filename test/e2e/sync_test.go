package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/internal/netem"
)

// The sync tests run a hub and edge agents as separate processes (the
// outpost binary, the fake runtime), each agent dialing the hub's QUIC
// sync endpoint through its own netem relay, and drive the hub with
// client-go as a user would.

const (
	// offlineFor is how long the node is cut off: the 60 seconds,
	// four times the 15s idle timeout, so the session is surely gone.
	offlineFor = 60 * time.Second
	// joinTimeout bounds the wait for agents to join and report their
	// nodes Ready.
	joinTimeout = 60 * time.Second
	// convergeTimeout bounds the wait for statuses to reach the hub once
	// a node is connected again. An agent that was cut off for a minute
	// dials again within its back-off (up to 16s then) plus a handshake.
	convergeTimeout = 90 * time.Second
	// crashBackOff is the agent's first restart back-off (kubelet's),
	// doubling after each crash, for a container that crashes again at
	// once.
	crashBackOff = 10 * time.Second
)

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds outpost and runs hubs and agents; skipped with -short")
	}
}

// restartAt returns when a container that exits as soon as it starts is
// started as attempt a, knowing that attempt last (>= 1) ended at ended:
// after attempt m (>= 1) crashes the agent waits crashBackOff*2^(m-1),
// capped at five minutes, as kubelet does. The agent's reconcile adds a
// little to each step; slack is the most it may add per step.
func restartAt(ended time.Time, last, a int, slack time.Duration) (earliest, latest time.Time) {
	earliest, latest = ended, ended
	for m := last; m < a; m++ {
		d := min(crashBackOff<<(m-1), 5*time.Minute)
		earliest = earliest.Add(d)
		latest = latest.Add(d + slack)
	}
	return earliest, latest
}

// crashInfo is the crash loop of container main as the hub shows it.
type crashInfo struct {
	restarts int
	exitCode int32
	finished time.Time // of the last crash; second precision
}

func crashLoop(p *corev1.Pod) (crashInfo, bool) {
	cs := mainStatus(p)
	if cs == nil || cs.LastTerminationState.Terminated == nil {
		return crashInfo{}, false
	}
	t := cs.LastTerminationState.Terminated
	return crashInfo{restarts: int(cs.RestartCount), exitCode: t.ExitCode, finished: t.FinishedAt.Time}, true
}

// TestSyncOfflineNodeResumes is the first scenario: a hub and three
// agents; one node is black-holed for a minute while its pods are created,
// changed and deleted on the hub and one of them crash-loops on the node;
// once the link is back everything converges, and the resume carries
// about what changed, not the node's whole view again.
func TestSyncOfflineNodeResumes(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub()
	const site = "store-1"
	token, caHash := h.createToken(site)

	nodes := []string{"edge-1", "edge-2", "edge-3"}
	const cutNode = "edge-2"
	const basePods = 6

	// Each node's view is made heavy before it joins: a ConfigMap of 64
	// KiB of random data (zstd cannot shrink it much) that its pods take
	// their environment from, and six pods. A resume that sent the whole
	// view again would carry it again.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, node := range nodes {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bulk-" + node, Namespace: metav1.NamespaceDefault}, Data: map[string]string{}}
		for i := range 16 {
			b := make([]byte, 3<<10)
			rand.Read(b)
			cm.Data[fmt.Sprintf("BLOCK_%02d", i)] = base64.StdEncoding.EncodeToString(b) // 4 KiB
		}
		if _, err := h.cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap: %v", err)
		}
		for i := range basePods {
			h.createPod(bulkPod(fmt.Sprintf("%s-p%d", node, i), node))
		}
	}
	f.logf("created a 64 KiB configmap and %d pods for each of %v before they join", basePods, nodes)

	edges := map[string]*edge{}
	for _, node := range nodes {
		edges[node] = f.startEdge(h, node, token, caHash)
	}
	f.eventually(joinTimeout, "nodes Ready with their labels", func() (bool, string) {
		for _, node := range nodes {
			n, err := h.node(node)
			if err != nil {
				return false, apiProblem(err)
			}
			if p := nodeProblem(n, site, runtime.GOOS, runtime.GOARCH); p != "" {
				return false, p
			}
		}
		return true, ""
	})
	f.logf("nodes %v Ready with hostname, os, arch and site labels", nodes)

	// want is the pods each node should end with; the check of a node
	// also takes the relay's byte count once it holds.
	want := map[string][]string{}
	for _, node := range nodes {
		for i := range basePods {
			want[node] = append(want[node], fmt.Sprintf("%s-p%d", node, i))
		}
	}
	f.eventually(joinTimeout, "base pods Running", func() (bool, string) {
		return nodesConverged(h, want, nil)
	})
	firstUp, firstDown := edges[cutNode].relay.Bytes()
	f.logf("base pods Running with full status; %s's join and first sync carried %s up, %s down", cutNode, kib(firstUp), kib(firstDown))

	before, err := h.pods()
	if err != nil {
		t.Fatal(err)
	}

	// A pod that crash-loops on the node to be cut off: its first crash
	// restarts at once, then after 10s, 20s, 40s...
	h.createPod(newPod("flap", cutNode, "crash:1"))
	var crash0 crashInfo
	f.eventually(joinTimeout, "flap crash-looping on the hub", func() (bool, string) {
		p, err := h.pod("flap")
		if err != nil {
			return false, apiProblem(err)
		}
		ci, ok := crashLoop(p)
		if !ok || ci.restarts < 1 {
			return false, fmt.Sprintf("flap: %+v", p.Status.ContainerStatuses)
		}
		crash0 = ci
		return true, ""
	})
	f.logf("flap: restartCount %d, last crash at %s (exit %d)", crash0.restarts, crash0.finished.Format(time.TimeOnly), crash0.exitCode)

	// Cut the node off. The other two see the same changes live.
	cut := edges[cutNode]
	liveUp0, liveDown0 := edges["edge-1"].relay.Bytes()
	cutAt := time.Now()
	cut.relay.Set(netem.Conditions{Blackhole: true})
	f.logf("%s black-holed for %v", cutNode, offlineFor)

	deleted := map[string]bool{}
	created := map[string]bool{}
	updated := map[string]bool{}
	for _, node := range nodes {
		for i := range 3 {
			name := fmt.Sprintf("%s-new%d", node, i)
			h.createPod(bulkPod(name, node))
			want[node] = append(want[node], name)
			created[name] = true
		}
		for i := range 3 {
			name := fmt.Sprintf("%s-p%d", node, i)
			patch := fmt.Sprintf(`{"metadata":{"labels":{"outpost.dev/rev":"2"},"annotations":{"outpost.dev/note":"changed while %s was cut off"}}}`, cutNode)
			if _, err := h.cs.CoreV1().Pods(metav1.NamespaceDefault).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatalf("patch %s: %v", name, err)
			}
			updated[name] = true
		}
		for _, i := range []int{4, 5} {
			name := fmt.Sprintf("%s-p%d", node, i)
			h.deletePod(name)
			want[node] = slices.DeleteFunc(want[node], func(s string) bool { return s == name })
			deleted[name] = true
		}
	}
	hubChanges := 3 + 3 + 2 // for each node
	f.logf("on the hub, for each node: 3 pods created, 3 relabeled and annotated, 2 deleted")

	// The nodes still connected converge at once; the cut-off node's
	// deleted pods wait, marked, for it to confirm.
	online := map[string][]string{"edge-1": want["edge-1"], "edge-3": want["edge-3"]}
	f.eventually(offlineFor/2, "the connected nodes converge while "+cutNode+" is cut off", func() (bool, string) {
		return nodesConverged(h, online, deleted)
	})
	liveUp1, liveDown1 := edges["edge-1"].relay.Bytes()
	f.logf("edge-1 and edge-3 converged live; edge-1's relay carried %s up, %s down for it", kib(liveUp1-liveUp0), kib(liveDown1-liveDown0))
	for i := range 2 {
		p, err := h.pod(fmt.Sprintf("%s-p%d", cutNode, 4+i))
		if err != nil {
			t.Fatalf("a pod of the cut-off node, deleted on the hub, is gone before the node confirmed: %v", err)
		}
		if p.DeletionTimestamp == nil {
			t.Fatalf("%s deleted but not marked", p.Name)
		}
	}

	f.waitUntil(cutAt.Add(offlineFor), "the link of "+cutNode+" stays black-holed")
	if n, err := h.node(cutNode); err == nil {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				f.logf("%s on the hub after %v cut off: Ready=%s (%s)", cutNode, offlineFor, c.Status, c.Reason)
			}
		}
	}
	restoreAt := time.Now()
	up0, down0 := cut.relay.Bytes()
	cut.relay.Set(netem.Conditions{})
	f.logf("%s's link restored after %.1fs", cutNode, restoreAt.Sub(cutAt).Seconds())

	// The restarts of flap that surely happened while the link was down,
	// and those that may have happened by now.
	var offlineRestarts int
	for a := crash0.restarts + 1; ; a++ {
		// finished has second precision: the crash was up to 1s later.
		earliest, latest := restartAt(crash0.finished, crash0.restarts, a, 2*time.Second)
		latest = latest.Add(time.Second)
		if latest.After(restoreAt) {
			break
		}
		if earliest.After(cutAt) {
			offlineRestarts++
		}
	}
	possibleRestarts := func(now time.Time) int {
		n := crash0.restarts
		for a := crash0.restarts + 1; ; a++ {
			if earliest, _ := restartAt(crash0.finished, crash0.restarts, a, 0); earliest.After(now) {
				return n
			}
			n = a
		}
	}

	var flap crashInfo
	f.eventually(convergeTimeout, cutNode+" converges after the link is back", func() (bool, string) {
		if ok, why := nodesConverged(h, map[string][]string{cutNode: want[cutNode]}, deleted); !ok {
			return false, why
		}
		p, err := h.pod("flap")
		if err != nil {
			return false, apiProblem(err)
		}
		ci, ok := crashLoop(p)
		if !ok || ci.restarts < crash0.restarts+offlineRestarts || !ci.finished.After(cutAt) {
			return false, fmt.Sprintf("flap: restartCount %d, last crash at %s; want at least %d restarts, the last after %s",
				ci.restarts, ci.finished.Format(time.TimeOnly), crash0.restarts+offlineRestarts, cutAt.Format(time.TimeOnly))
		}
		flap = ci
		return true, ""
	})
	convergedAt := time.Now()
	up1, down1 := cut.relay.Bytes()
	resumeUp, resumeDown := up1-up0, down1-down0
	f.logf("%s converged %.1fs after the link came back", cutNode, convergedAt.Sub(restoreAt).Seconds())

	// The whole fleet, once more: every pod where it should be, running,
	// the same pod as before (UID) and not restarted by a change of its
	// labels; nothing else.
	after, err := h.pods()
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := nodesConverged(h, want, deleted); !ok {
		t.Fatalf("fleet no longer converged: %s", why)
	}
	for name, p := range after {
		if name == "flap" || created[name] {
			continue
		}
		old := before[name]
		if old == nil {
			t.Errorf("pod %s on the hub was never created", name)
			continue
		}
		if p.UID != old.UID {
			t.Errorf("pod %s UID %s, was %s", name, p.UID, old.UID)
		}
		oc, nc := mainStatus(old), mainStatus(p)
		if nc.ContainerID != oc.ContainerID || nc.RestartCount != oc.RestartCount {
			t.Errorf("pod %s container %s restarts %d, was %s restarts %d: a change of labels must not restart it",
				name, nc.ContainerID, nc.RestartCount, oc.ContainerID, oc.RestartCount)
		}
		if updated[name] && (p.Labels["outpost.dev/rev"] != "2" || p.Annotations["outpost.dev/note"] == "") {
			t.Errorf("pod %s lost its change: labels %v, annotations %v", name, p.Labels, p.Annotations)
		}
	}
	f.eventually(30*time.Second, "nodes Ready again", func() (bool, string) {
		for _, node := range nodes {
			n, err := h.node(node)
			if err != nil {
				return false, apiProblem(err)
			}
			if p := nodeProblem(n, site, runtime.GOOS, runtime.GOARCH); p != "" {
				return false, p
			}
		}
		return true, ""
	})
	if maxRestarts := possibleRestarts(convergedAt) + 1; flap.restarts > maxRestarts {
		t.Errorf("flap restartCount %d; at most %d restarts could have happened by then", flap.restarts, maxRestarts)
	}
	if flap.exitCode != 1 {
		t.Errorf("flap last exit code %d, want 1", flap.exitCode)
	}
	f.logf("flap: restartCount %d at the cut, %d after (at least %d surely while cut off); last crash at %s",
		crash0.restarts, flap.restarts, offlineRestarts, flap.finished.Format(time.TimeOnly))

	// What the resume cost, against the first sync of the same node (its
	// whole view, then of about the same size) and the live changes of a
	// connected node.
	offlineChanges := hubChanges + (flap.restarts - crash0.restarts)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "traffic through the relay\tchanges\tup\tdown\ttotal\tper change\t")
	row := func(what string, changes int, up, down int64) {
		per := "-"
		if changes > 0 {
			per = kib((up + down) / int64(changes))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", what, changes, kib(up), kib(down), kib(up+down), per)
	}
	row(cutNode+": join + first sync (whole view)", basePods+2, firstUp, firstDown)
	row("edge-1: same hub changes, live", hubChanges, liveUp1-liveUp0, liveDown1-liveDown0)
	row(cutNode+": resume after 60s offline", offlineChanges, resumeUp, resumeDown)
	tw.Flush()
	t.Logf("bytes carried (the whole view holds a 64 KiB configmap and %d pods):\n%s", basePods, b.String())

	// A resume that sent the node's whole view again would carry the
	// configmap again: at least the first sync's bytes down. What did
	// change costs a few KiB an object (the pod down, its status up, the
	// status echoed down with the pod, the confirmation of a deletion).
	if resumeDown*2 > firstDown {
		t.Errorf("resume carried %s down, over half of the first sync's %s: the node got much more than what changed", kib(resumeDown), kib(firstDown))
	}
	const perChange, fixed = 4 << 10, 16 << 10 // fixed: a new handshake, keep-alives, the node's own status
	if limit := int64(offlineChanges*perChange + fixed); resumeUp+resumeDown > limit {
		t.Errorf("resume carried %s for %d changes, over %s (%s a change + %s)", kib(resumeUp+resumeDown), offlineChanges, kib(limit), kib(perChange), kib(fixed))
	}
}

// bulkPod returns a pod of node whose environment comes from the node's
// bulk configmap, so that the configmap is in the node's view.
func bulkPod(name, node string) *corev1.Pod {
	p := newPod(name, node, "nginx")
	p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "bulk-" + node}},
	}}
	return p
}

// nodesConverged reports whether, for each node of want, the hub holds
// exactly the pods listed bound to it (among the pods not named flap),
// each running with a complete status, with distinct pod IPs and
// container IDs; and whether every pod of gone is gone from the hub. Its
// reason says what is still missing.
func nodesConverged(h *syncHub, want map[string][]string, gone map[string]bool) (bool, string) {
	pods, err := h.pods()
	if err != nil {
		return false, apiProblem(err)
	}
	for name := range gone {
		if p := pods[name]; p != nil {
			if _, ok := want[p.Spec.NodeName]; ok {
				return false, fmt.Sprintf("%s (deleted) still on the hub; deletionTimestamp %v", name, p.DeletionTimestamp)
			}
		}
	}
	for node, names := range want {
		var have []string
		ips, ids := map[string]string{}, map[string]string{}
		for name, p := range pods {
			if p.Spec.NodeName != node || name == "flap" {
				continue
			}
			have = append(have, name)
			if prob := runningProblem(p); prob != "" {
				return false, prob
			}
			if other, ok := ips[p.Status.PodIP]; ok {
				return false, fmt.Sprintf("pods %s and %s share IP %s", name, other, p.Status.PodIP)
			}
			ips[p.Status.PodIP] = name
			id := mainStatus(p).ContainerID
			if other, ok := ids[id]; ok {
				return false, fmt.Sprintf("pods %s and %s share container %s", name, other, id)
			}
			ids[id] = name
		}
		slices.Sort(have)
		w := slices.Sorted(slices.Values(names))
		if !slices.Equal(have, w) {
			return false, fmt.Sprintf("node %s has pods %v, want %v", node, have, w)
		}
	}
	return true, ""
}

// TestSyncHubKilled is the second scenario: the hub is killed
// with SIGKILL and restarted on the same data directory and sync address;
// the agents reconnect and resume, a pod created right after the restart
// runs, and a crash that happened while the hub was down shows on it.
//
// The hub is down for a few seconds only, around a crash the agent's
// back-off schedules, so that the agents' QUIC connections are still alive
// when it is back: the restarted hub, which keeps its stateless-reset key,
// must then tell them at once that their connections are gone, rather
// than let them wait out the 15s idle timeout. edge-c dials the hub
// without a relay, to check exactly that: a netem relay stops forwarding
// what comes back to a client once its target refused a datagram (the
// ICMP error ends the relay's reader for that client), so the relayed
// agents may or may not get the reset and only their reconnection is
// checked.
func TestSyncHubKilled(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub()
	const site = "store-2"
	token, caHash := h.createToken(site)
	nodes := []string{"edge-a", "edge-b", "edge-c"}
	edges := map[string]*edge{
		"edge-a": f.startEdge(h, "edge-a", token, caHash),
		"edge-b": f.startEdge(h, "edge-b", token, caHash),
		"edge-c": f.startEdgeDirect(h, "edge-c", token, caHash),
	}
	want := map[string][]string{}
	for _, n := range nodes {
		h.createPod(newPod(n+"-web", n, "nginx"))
		want[n] = []string{n + "-web"}
	}
	h.createPod(newPod("flap", "edge-a", "crash:1"))
	f.eventually(joinTimeout, "pods Running", func() (bool, string) { return nodesConverged(h, want, nil) })
	var crash0 crashInfo
	f.eventually(joinTimeout, "flap crash-looping", func() (bool, string) {
		p, err := h.pod("flap")
		if err != nil {
			return false, apiProblem(err)
		}
		ci, ok := crashLoop(p)
		crash0 = ci
		return ok && ci.restarts >= 1, fmt.Sprintf("flap %+v", p.Status.ContainerStatuses)
	})
	f.logf("pods Running; flap restartCount %d, last crash at %s", crash0.restarts, crash0.finished.Format(time.TimeOnly))

	// flap is restarted, and crashes at once, one back-off after its last
	// crash (whose time the hub shows to the second): kill the hub just
	// before, start it again just after.
	earliest, latest := restartAt(crash0.finished, crash0.restarts, crash0.restarts+1, time.Second)
	latest = latest.Add(time.Second) // finished was truncated
	f.waitUntil(earliest.Add(-time.Second), "until just before flap's next crash")
	before, err := h.pods()
	if err != nil {
		t.Fatal(err)
	}
	if p := before["flap"]; mainStatus(p).RestartCount != int32(crash0.restarts) {
		t.Fatalf("flap restarted before its back-off ended: restartCount %d, was %d", mainStatus(p).RestartCount, crash0.restarts)
	}
	sessions := map[string]int{}
	for n, e := range edges {
		sessions[n] = e.connects()
	}
	h.kill()
	killedAt := time.Now()
	f.waitUntil(latest.Add(500*time.Millisecond), "the hub stays down until flap's next crash is past")
	h.start()
	hubBack := h.readyAt
	f.logf("hub down for %.1fs (from kill to ready)", hubBack.Sub(killedAt).Seconds())

	for _, n := range nodes {
		e := edges[n]
		line := e.waitConnects(sessions[n], 45*time.Second)
		after := logTime(t, line).Sub(hubBack)
		// The old session's end is the first after the kill: later ones
		// are redials that failed while the hub was still starting.
		why := "?"
		for _, l := range e.logLines(logEnded) {
			if logTime(t, l).After(killedAt) {
				why = logField(l, "err")
				break
			}
		}
		f.logf("%s reconnected %.1fs after the hub was ready (inventory=%s); its old session ended with: %s",
			n, after.Seconds(), logField(line, "inventory"), why)
		if e.relay == nil {
			// A silent hub is probed every 2s with a datagram large
			// enough for the restarted hub to answer with a stateless
			// reset; a link silent for 15s is given up. Either way the
			// node must be back soon after the hub.
			if !strings.Contains(why, "stateless reset") && !strings.Contains(why, "link to the hub is dead") {
				t.Errorf("%s's old session ended with %q, want a stateless reset from the restarted hub "+
					"or the node's own dead-link detection", n, why)
			}
			if after > 10*time.Second {
				t.Errorf("%s reconnected %.1fs after the hub was back, want within 10s (a keep-alive, a reset, a dial)", n, after.Seconds())
			}
		}
	}

	// A pod created right after the restart runs.
	for _, n := range nodes {
		h.createPod(newPod(n+"-after", n, "nginx"))
		want[n] = append(want[n], n+"-after")
	}
	f.eventually(convergeTimeout, "pods created after the restart Running", func() (bool, string) {
		return nodesConverged(h, want, nil)
	})
	f.logf("pods created after the restart Running")

	var flap crashInfo
	f.eventually(convergeTimeout, "flap's crash while the hub was down reaches the hub", func() (bool, string) {
		p, err := h.pod("flap")
		if err != nil {
			return false, apiProblem(err)
		}
		ci, _ := crashLoop(p)
		flap = ci
		return ci.restarts > crash0.restarts && !ci.finished.Before(killedAt.Truncate(time.Second)),
			fmt.Sprintf("flap restartCount %d, last crash at %s", ci.restarts, ci.finished.Format(time.TimeOnly))
	})
	f.logf("flap: restartCount %d before the kill, %d now; last crash at %s (hub killed at %s, ready again at %s)",
		crash0.restarts, flap.restarts, flap.finished.Format(time.TimeOnly), killedAt.Format(time.TimeOnly), hubBack.Format(time.TimeOnly))

	after, err := h.pods()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		old, cur := before[n+"-web"], after[n+"-web"]
		if cur.UID != old.UID || mainStatus(cur).ContainerID != mainStatus(old).ContainerID || mainStatus(cur).RestartCount != 0 {
			t.Errorf("%s-web changed across the hub restart: uid %s -> %s, container %s -> %s, restarts %d",
				n, old.UID, cur.UID, mainStatus(old).ContainerID, mainStatus(cur).ContainerID, mainStatus(cur).RestartCount)
		}
		node, err := h.node(n)
		if err != nil {
			t.Fatal(err)
		}
		if p := nodeProblem(node, site, runtime.GOOS, runtime.GOARCH); p != "" {
			t.Error(p)
		}
	}
}

// TestSyncEdgeRestartsOffline is the third scenario: with the hub
// stopped, an agent is killed with SIGKILL and started again; it brings
// its pods back from its checkpoint without the hub, and once the hub
// returns their status converges.
func TestSyncEdgeRestartsOffline(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub()
	token, caHash := h.createToken("store-3")
	const node = "edge-x"
	e := f.startEdge(h, node, token, caHash)
	names := []string{"x-web-0", "x-web-1"}
	for _, n := range names {
		h.createPod(newPod(n, node, "nginx"))
	}
	h.createPod(newPod("flap", node, "crash:1"))
	want := map[string][]string{node: names}
	f.eventually(joinTimeout, "pods Running", func() (bool, string) { return nodesConverged(h, want, nil) })
	f.eventually(joinTimeout, "flap crash-looping", func() (bool, string) {
		p, err := h.pod("flap")
		if err != nil {
			return false, apiProblem(err)
		}
		ci, ok := crashLoop(p)
		return ok && ci.restarts >= 1, fmt.Sprintf("flap %+v", p.Status.ContainerStatuses)
	})
	before, err := h.pods()
	if err != nil {
		t.Fatal(err)
	}

	h.stop()
	e.kill()
	killedAt := time.Now()
	e.start()
	// The agent logs nothing when it starts pods; what shows from outside
	// that it runs on without the hub is its first failed dial, some 10s
	// later. The pods' start times, once the hub is back, show when they
	// were started.
	f.eventually(45*time.Second, node+" gives up a first dial of the stopped hub", func() (bool, string) {
		if !e.proc.running() {
			t.Fatalf("%s exited without its hub: %v", node, e.proc.waitErr)
		}
		ls := e.logLines(logEnded)
		if len(ls) == 0 {
			return false, "no failed dial yet"
		}
		f.logf("%s: %s", node, logField(ls[0], "err"))
		return true, ""
	})
	if n := e.connects(); n != 0 {
		t.Fatalf("%s connected %d times to a stopped hub", node, n)
	}
	hubStart := time.Now()
	h.start()
	line := e.waitConnects(0, 45*time.Second)
	f.logf("%s connected %.1fs after the hub was ready (inventory=%s)", node, time.Since(h.readyAt).Seconds(), logField(line, "inventory"))

	f.eventually(convergeTimeout, "pods Running again, started before the hub came back", func() (bool, string) {
		if ok, why := nodesConverged(h, want, nil); !ok {
			return false, why
		}
		for _, n := range names {
			p, err := h.pod(n)
			if err != nil {
				return false, apiProblem(err)
			}
			// startedAt has second precision.
			started := mainStatus(p).State.Running.StartedAt.Time
			if started.Before(killedAt.Add(-time.Second).Truncate(time.Second)) {
				return false, fmt.Sprintf("%s started at %s, before the agent was killed at %s: its status is not new yet", n, started.Format(time.TimeOnly), killedAt.Format(time.TimeOnly))
			}
		}
		return true, ""
	})
	after, err := h.pods()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		old, cur := before[n], after[n]
		oc, nc := mainStatus(old), mainStatus(cur)
		started := nc.State.Running.StartedAt.Time
		f.logf("%s: started at %s (agent restarted at %s, hub started at %s), restartCount %d -> %d, podIP %s -> %s",
			n, started.Format(time.TimeOnly), killedAt.Format(time.TimeOnly), hubStart.Format(time.TimeOnly), oc.RestartCount, nc.RestartCount, old.Status.PodIP, cur.Status.PodIP)
		if !started.Before(hubStart) {
			t.Errorf("%s started at %s, after the hub was started again at %s: the agent did not bring it back from its checkpoint by itself", n, started.Format(time.TimeOnly), hubStart.Format(time.TimeOnly))
		}
		if cur.UID != old.UID {
			t.Errorf("%s UID %s, was %s", n, cur.UID, old.UID)
		}
		// The container was lost with the runtime: one restart, as
		// kubelet counts a container gone in a reboot.
		if nc.RestartCount < oc.RestartCount || nc.RestartCount > oc.RestartCount+1 {
			t.Errorf("%s restartCount %d, was %d: want %d or %d", n, nc.RestartCount, oc.RestartCount, oc.RestartCount, oc.RestartCount+1)
		}
	}
	// flap's container was lost too, and restarted at once: its count
	// goes on from where it was, never back.
	f.eventually(convergeTimeout, "flap's restart count goes on", func() (bool, string) {
		p, err := h.pod("flap")
		if err != nil {
			return false, apiProblem(err)
		}
		oc, nc := mainStatus(before["flap"]), mainStatus(p)
		if nc == nil || nc.RestartCount <= oc.RestartCount {
			return false, fmt.Sprintf("flap restartCount %v, was %d", nc, oc.RestartCount)
		}
		f.logf("flap: restartCount %d before the agent was killed, %d now", oc.RestartCount, nc.RestartCount)
		return true, ""
	})
	n, err := h.node(node)
	if err != nil {
		t.Fatal(err)
	}
	if p := nodeProblem(n, "store-3", runtime.GOOS, runtime.GOARCH); p != "" {
		t.Error(p)
	}
}

// TestSyncJoinRefused checks that an agent the hub refuses to admit exits
// with a non-zero status and says why, and that no node is registered.
func TestSyncJoinRefused(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub()
	token, caHash := h.createToken("")
	id, _, _ := strings.Cut(token, ".")
	for _, tc := range []struct {
		name, token, caHash string
		want                []string
	}{
		// An unknown token and a wrong secret are refused alike, so that
		// refusals do not tell which token ids exist.
		{"unknown-token", "abcdef.0123456789abcdef", caHash, []string{"hub refused to admit this node", "there is no such token, or its secret is wrong"}},
		{"wrong-secret", id + ".0000000000000000", caHash, []string{"hub refused to admit this node", "there is no such token, or its secret is wrong"}},
		// A malformed flag stops the agent before it dials.
		{"malformed-token", "not-a-token", caHash, []string{"invalid --token", "malformed"}},
		{"wrong-ca-hash", token, "sha256:" + strings.Repeat("ab", 32), []string{"hub refused to admit this node", "CA hash"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := "refused-" + tc.name
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, outpostBinary(t), "edge", "--hub", h.syncAddr, "--token", tc.token, "--ca-cert-hash", tc.caHash,
				"--node-name", node, "--data-dir", t.TempDir(), "--runtime", "fake")
			cmd.WaitDelay = 5 * time.Second
			p := startProc(t, cmd)
			f.track(node, p)
			t.Cleanup(func() {
				if p.running() {
					p.cmd.Process.Kill()
					<-p.exited
				}
			})
			err := p.wait(t, 70*time.Second)
			if ctx.Err() != nil {
				t.Fatalf("agent still running after 60s with a bad token; killed it\n%s", p.describe())
			}
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() == 0 {
				t.Fatalf("agent exited with %v, want a non-zero status\n%s", err, p.describe())
			}
			stderr := p.stderr.String()
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q\n%s", w, p.describe())
				}
			}
			t.Logf("%s exit status %d; %s", time.Now().Format("15:04:05.000"), ee.ExitCode(), strings.TrimSpace(lastLine(stderr, "Error:")))
			if _, err := h.node(node); !isNotFound(err) {
				t.Errorf("node %s: get = %v, want not found: a refused node must not be registered", node, err)
			}
		})
	}
}

// lastLine returns the last line of s that starts with prefix, or the last
// line.
func lastLine(s, prefix string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}
