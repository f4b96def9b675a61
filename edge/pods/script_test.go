package pods

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the scripts in testdata/ with the output they produce")

// TestScripts replays the scenarios in testdata/*.txt: an agent loop of
// Plan, the fake runtime and Status, driven by commands, whose output must
// match the script's. Run with -rewrite to write the output into them,
// then review the diff.
//
// A script is a sequence of commands, each followed by "----" and its
// expected output, up to a blank line. Lines starting with "#" before a
// command are comments. Commands:
//
//	pod NAME [uid=U] [ns=NS] [restart=Always|OnFailure|Never] [init=a:img,*side:img]
//	    [containers=main:img,...] [grace=SECONDS] [volume=NAME:pvc|nfs|emptydir]
//	                                desire a pod (*: a sidecar init container)
//	image NAME CONTAINER IMAGE      change a container's image
//	delete NAME [grace=SECONDS]     the hub deletes the pod gracefully
//	remove NAME                     the hub removes the pod object
//	plan                            Plan once and run its actions
//	run                             plan until a plan has no actions (at most 20)
//	tick DURATION                   advance the clock
//	exit NAME CONTAINER CODE        the container exits
//	exit-pod NAME CODE              every running container of the pod exits
//	reboot                          the node loses power
//	fail-pull IMAGE / allow-pull IMAGE
//	status NAME                     print the pod's status
//	record NAME                     print the pod's record
//	runtime                         print what the runtime holds
//	forget-records                  the agent restarts and its records are lost
//	forget-status                   the agent's last statuses are lost
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runScript(t, file) })
	}
}

type block struct {
	comments []string
	cmd      string
	want     string
	line     int
}

func parseScript(t *testing.T, file string) []block {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []block
	var cur *block
	var comments []string
	inOutput := false
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case inOutput && line == "":
			inOutput = false
		case inOutput:
			cur.want += line + "\n"
		case line == "----":
			if cur == nil {
				t.Fatalf("%s:%d: ---- without a command", file, n)
			}
			inOutput = true
		case line == "" || strings.HasPrefix(line, "#"):
			comments = append(comments, line)
		default:
			blocks = append(blocks, block{comments: comments, cmd: line, line: n})
			cur = &blocks[len(blocks)-1]
			comments = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

func runScript(t *testing.T, file string) {
	blocks := parseScript(t, file)
	d := newDriver()
	var out strings.Builder
	for i := range blocks {
		b := &blocks[i]
		got := d.do(t, b.cmd)
		if *rewrite {
			for _, c := range b.comments {
				out.WriteString(c + "\n")
			}
			out.WriteString(b.cmd + "\n----\n" + got + "\n")
			continue
		}
		if got != b.want {
			t.Fatalf("%s:%d: %s = \n%s\nwant\n%s(go test -rewrite writes the output into the script)", file, b.line, b.cmd, got, b.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// driver is the agent loop of the scripts.
type driver struct {
	now     time.Time
	rt      *fake.Runtime
	pods    []*corev1.Pod      // desired, in the order added
	records map[string][]byte  // persisted, by UID
	probed  map[string]*Probed // by UID; nil until a probe command: no prober
}

func newDriver() *driver {
	d := &driver{now: t0, records: make(map[string][]byte)}
	d.rt = fake.New(fake.Config{Clock: func() time.Time { return d.now }, Behavior: fake.ByImage})
	return d
}

func (d *driver) rel(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return "+" + t.Sub(t0).String()
}

func (d *driver) pod(t *testing.T, name string) *corev1.Pod {
	for _, p := range d.pods {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pod %q", name)
	return nil
}

func (d *driver) loadRecords(t *testing.T) map[string]Record {
	m := make(map[string]Record, len(d.records))
	for uid, b := range d.records {
		r, err := UnmarshalRecord(b)
		if err != nil {
			t.Fatalf("UnmarshalRecord(%s) = %v", b, err)
		}
		m[uid] = r
	}
	return m
}

func (d *driver) store(t *testing.T, uid string, r Record) {
	b, err := MarshalRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	d.records[uid] = b
}

func (d *driver) list(t *testing.T) []runtime.PodStatus {
	l, err := d.rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// probedOf returns what the probes of p found, nil with no prober.
func (d *driver) probedOf(p *corev1.Pod) *Probed {
	if d.probed == nil {
		return nil
	}
	if pr := d.probed[string(p.UID)]; pr != nil {
		return pr
	}
	return &Probed{}
}

func actualOf(l []runtime.PodStatus, uid string) *runtime.PodStatus {
	for i := range l {
		if l[i].Pod.UID == uid {
			return &l[i]
		}
	}
	return nil
}

// plan runs one round of the agent loop and returns what it did, and
// whether there were actions.
func (d *driver) plan(t *testing.T) (string, bool) {
	var out strings.Builder
	records := d.loadRecords(t)
	actual := d.list(t)
	dec := checkedPlan(t, d.pods, actual, records, d.probed, d.now)
	ctx := context.Background()
	n := 0
	for _, pd := range dec.Pods {
		if pd.Forget {
			delete(d.records, pd.Pod.UID)
			fmt.Fprintf(&out, "forget record of %s\n", pd.Pod.UID)
		} else {
			d.store(t, pd.Pod.UID, pd.Record)
		}
		rec := pd.Record
		for _, a := range pd.Actions {
			n++
			var err error
			switch a.Type {
			case StartContainer:
				err = d.rt.StartContainer(ctx, a.Pod, a.Spec, a.Attempt)
			case StopContainer:
				err = d.rt.StopContainer(ctx, a.Pod, a.Container, a.Grace)
			case RemovePod:
				err = d.rt.RemovePod(ctx, a.Pod)
			}
			res := "ok"
			if err != nil {
				res = err.Error()
			}
			fmt.Fprintf(&out, "%v -> %s\n", a, res)
			rec = Observe(rec, a, err, d.now)
		}
		if !pd.Forget {
			d.store(t, pd.Pod.UID, rec)
		}
	}
	if !dec.NextWake.IsZero() {
		fmt.Fprintf(&out, "wake %s\n", d.rel(dec.NextWake))
	}
	// The statuses the agent would push, from a fresh List.
	actual = d.list(t)
	records = d.loadRecords(t)
	for _, p := range d.pods {
		p.Status = Status(p, actualOf(actual, string(p.UID)), records[string(p.UID)], d.probedOf(p), d.now)
	}
	if out.Len() == 0 {
		out.WriteString("nothing to do\n")
	}
	return out.String(), n > 0
}

// checkedPlan calls Plan and fails the test if Plan changed its arguments
// or decides differently when called twice.
func checkedPlan(t *testing.T, desired []*corev1.Pod, actual []runtime.PodStatus, records map[string]Record, probed map[string]*Probed, now time.Time) Decision {
	t.Helper()
	desired0 := make([]*corev1.Pod, len(desired))
	for i, p := range desired {
		desired0[i] = p.DeepCopy()
	}
	actual0 := make([]runtime.PodStatus, len(actual))
	for i, a := range actual {
		actual0[i] = a
		actual0[i].Containers = slices.Clone(a.Containers)
	}
	encode := func() map[string]string {
		m := make(map[string]string, len(records))
		for uid, r := range records {
			b, err := MarshalRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			m[uid] = string(b)
		}
		return m
	}
	records0 := encode()
	d := Plan(desired, actual, records, probed, now)
	if !reflect.DeepEqual(desired, desired0) || !reflect.DeepEqual(actual, actual0) || !reflect.DeepEqual(encode(), records0) {
		t.Fatalf("Plan changed its arguments")
	}
	if again := Plan(desired, actual, records, probed, now); !reflect.DeepEqual(d, again) {
		t.Fatalf("Plan(...) = %+v, then %+v for the same arguments", d, again)
	}
	return d
}

func (d *driver) do(t *testing.T, cmd string) string {
	args := strings.Fields(cmd)
	opts := map[string]string{}
	var pos []string
	for _, a := range args[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			opts[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	need := func(n int) {
		if len(pos) != n {
			t.Fatalf("%s: want %d arguments", cmd, n)
		}
	}
	switch args[0] {
	case "pod":
		need(1)
		d.pods = append(d.pods, d.newPod(t, pos[0], opts))
		return "ok\n"
	case "image":
		need(3)
		p := d.pod(t, pos[0])
		for _, l := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range l {
				if l[i].Name == pos[1] {
					l[i].Image = pos[2]
				}
			}
		}
		p.Generation++
		return "ok\n"
	case "delete":
		need(1)
		p := d.pod(t, pos[0])
		grace := int64(30)
		if p.Spec.TerminationGracePeriodSeconds != nil {
			grace = *p.Spec.TerminationGracePeriodSeconds
		}
		if g, ok := opts["grace"]; ok {
			grace = atoi(t, g)
		}
		p.DeletionTimestamp = &metav1.Time{Time: d.now.Add(time.Duration(grace) * time.Second)}
		p.DeletionGracePeriodSeconds = &grace
		return "ok\n"
	case "remove":
		need(1)
		p := d.pod(t, pos[0])
		d.pods = slices.DeleteFunc(d.pods, func(x *corev1.Pod) bool { return x == p })
		return "ok\n"
	case "plan":
		out, _ := d.plan(t)
		return out
	case "run":
		var out strings.Builder
		for i := 0; ; i++ {
			if i == 20 {
				t.Fatalf("%s: still acting after 20 plans", cmd)
			}
			s, acted := d.plan(t)
			if !acted {
				out.WriteString(s)
				break
			}
			out.WriteString(s)
		}
		return out.String()
	case "tick":
		need(1)
		dur, err := time.ParseDuration(pos[0])
		if err != nil {
			t.Fatal(err)
		}
		d.now = d.now.Add(dur)
		return "now " + d.rel(d.now) + "\n"
	case "exit":
		need(3)
		if err := d.rt.Exit(string(d.pod(t, pos[0]).UID), pos[1], int32(atoi(t, pos[2]))); err != nil {
			return err.Error() + "\n"
		}
		return "ok\n"
	case "exit-pod":
		need(2)
		if err := d.rt.ExitPod(string(d.pod(t, pos[0]).UID), int32(atoi(t, pos[1]))); err != nil {
			return err.Error() + "\n"
		}
		return "ok\n"
	case "reboot":
		d.rt.Reboot()
		return "ok\n"
	case "fail-pull":
		need(1)
		d.rt.FailPull(pos[0], "not found")
		return "ok\n"
	case "allow-pull":
		need(1)
		d.rt.AllowPull(pos[0])
		return "ok\n"
	case "status":
		need(1)
		p := d.pod(t, pos[0])
		p.Status = Status(p, actualOf(d.list(t), string(p.UID)), d.loadRecords(t)[string(p.UID)], d.probedOf(p), d.now)
		return d.formatStatus(&p.Status)
	case "probe":
		// probe POD CONTAINER [started] [ready] [unhealthy] [msg=...]:
		// the probes of the container's running instance found that.
		if len(pos) < 2 {
			t.Fatalf("%s: want a pod and a container", cmd)
		}
		p := d.pod(t, pos[0])
		ps := actualOf(d.list(t), string(p.UID))
		var id string
		if ps != nil {
			if c := ps.Container(pos[1]); c != nil {
				id = c.ID
			}
		}
		if id == "" {
			return "no such container\n"
		}
		r := ProbeResult{ID: id, Message: opts["msg"]}
		for _, w := range pos[2:] {
			switch w {
			case "started":
				r.Started = true
			case "ready":
				r.Ready = true
			case "unhealthy":
				r.Unhealthy = true
			default:
				t.Fatalf("%s: unknown result %q", cmd, w)
			}
		}
		if d.probed == nil {
			d.probed = map[string]*Probed{}
		}
		pr := d.probed[string(p.UID)]
		if pr == nil {
			pr = &Probed{Results: map[string]ProbeResult{}}
			d.probed[string(p.UID)] = pr
		}
		pr.Results[pos[1]] = r
		return "ok\n"
	case "reject":
		// reject POD REASON MESSAGE...: the node's admission refused the
		// pod before its first plan, as the caller records it.
		if len(pos) < 2 {
			t.Fatalf("%s: want a pod and a reason", cmd)
		}
		uid := string(d.pod(t, pos[0]).UID)
		r := d.loadRecords(t)[uid]
		r.Rejected = &Rejection{Reason: pos[1], Message: strings.Join(pos[2:], " ")}
		d.store(t, uid, r)
		return "ok\n"
	case "evict":
		// evict POD MESSAGE...: the node's eviction manager evicted the
		// running pod, as the caller records it.
		if len(pos) < 1 {
			t.Fatalf("%s: want a pod", cmd)
		}
		uid := string(d.pod(t, pos[0]).UID)
		r := d.loadRecords(t)[uid]
		r.Rejected = &Rejection{Reason: "Evicted", Message: strings.Join(pos[1:], " "), Evicted: true}
		d.store(t, uid, r)
		return "ok\n"
	case "prober":
		// prober: a prober runs on the node, with no results yet.
		if d.probed == nil {
			d.probed = map[string]*Probed{}
		}
		return "ok\n"
	case "record":
		need(1)
		b, ok := d.records[string(d.pod(t, pos[0]).UID)]
		if !ok {
			return "none\n"
		}
		return string(b) + "\n"
	case "runtime":
		return d.formatRuntime(d.list(t))
	case "forget-records":
		d.records = make(map[string][]byte)
		return "ok\n"
	case "forget-status":
		for _, p := range d.pods {
			p.Status = corev1.PodStatus{Phase: corev1.PodPending}
		}
		return "ok\n"
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

func atoi(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (d *driver) newPod(t *testing.T, name string, opts map[string]string) *corev1.Pod {
	uid := "uid-" + name
	if u, ok := opts["uid"]; ok {
		uid = u
	}
	ns := "default"
	if n, ok := opts["ns"]; ok {
		ns = n
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Generation: 1},
		Spec: corev1.PodSpec{
			NodeName:      "edge-1",
			RestartPolicy: corev1.RestartPolicy(opts["restart"]),
		},
		Status: corev1.PodStatus{
			Phase:    corev1.PodPending,
			QOSClass: corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Time{Time: d.now},
			}},
		},
	}
	if p.Spec.RestartPolicy == "" {
		p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	parse := func(list string) []corev1.Container {
		var out []corev1.Container
		for _, c := range strings.Split(list, ",") {
			n, img, ok := strings.Cut(c, ":")
			if !ok {
				t.Fatalf("container %q is not name:image", c)
			}
			ctr := corev1.Container{Name: strings.TrimPrefix(n, "*"), Image: img}
			if strings.HasPrefix(n, "*") {
				ctr.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
			}
			out = append(out, ctr)
		}
		return out
	}
	if l := cmp.Or(opts["containers"], "main:nginx"); l != "-" {
		p.Spec.Containers = parse(l)
	}
	if l, ok := opts["init"]; ok {
		p.Spec.InitContainers = parse(l)
	}
	if g, ok := opts["grace"]; ok {
		p.Spec.TerminationGracePeriodSeconds = new(atoi(t, g))
	}
	// liveness=, readiness= and startup= name the containers with such
	// a probe.
	for _, kind := range []string{"liveness", "readiness", "startup"} {
		for _, name := range strings.Split(opts[kind], ",") {
			for i := range p.Spec.Containers {
				if c := &p.Spec.Containers[i]; c.Name == name {
					pr := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
					switch kind {
					case "liveness":
						c.LivenessProbe = pr
					case "readiness":
						c.ReadinessProbe = pr
					case "startup":
						c.StartupProbe = pr
					}
				}
			}
		}
	}
	if v, ok := opts["volume"]; ok {
		n, typ, _ := strings.Cut(v, ":")
		vol := corev1.Volume{Name: n}
		switch typ {
		case "pvc":
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: n}
		case "nfs":
			vol.NFS = &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}
		case "emptydir":
			vol.EmptyDir = &corev1.EmptyDirVolumeSource{}
		default:
			t.Fatalf("unknown volume type %q", typ)
		}
		p.Spec.Volumes = append(p.Spec.Volumes, vol)
	}
	return p
}

func (d *driver) formatRuntime(l []runtime.PodStatus) string {
	if len(l) == 0 {
		return "empty\n"
	}
	var b strings.Builder
	for _, p := range l {
		fmt.Fprintf(&b, "%s/%s %s\n", p.Pod.Namespace, p.Pod.Name, p.IP)
		for _, c := range p.Containers {
			fmt.Fprintf(&b, "  %s %s attempt=%d %s", c.Name, c.Image, c.Attempt, c.State)
			if c.State == runtime.StateExited {
				fmt.Fprintf(&b, " %d %s at %s", c.ExitCode, c.Reason, d.rel(c.FinishedAt))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func (d *driver) formatStatus(s *corev1.PodStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", s.Phase)
	if s.Reason != "" {
		fmt.Fprintf(&b, " reason=%s", s.Reason)
	}
	if s.StartTime != nil {
		fmt.Fprintf(&b, " start=%s", d.rel(s.StartTime.Time))
	}
	if s.PodIP != "" {
		fmt.Fprintf(&b, " ip=%s", s.PodIP)
	}
	b.WriteString("\n")
	for _, c := range s.Conditions {
		fmt.Fprintf(&b, "  %s=%s", c.Type, c.Status)
		if c.Reason != "" {
			fmt.Fprintf(&b, " %s", c.Reason)
		}
		if c.Message != "" {
			fmt.Fprintf(&b, " %q", c.Message)
		}
		fmt.Fprintf(&b, " since %s\n", d.rel(c.LastTransitionTime.Time))
	}
	for _, c := range s.InitContainerStatuses {
		b.WriteString("  init " + d.formatContainer(&c))
	}
	for _, c := range s.ContainerStatuses {
		b.WriteString("  " + d.formatContainer(&c))
	}
	return b.String()
}

func (d *driver) formatContainer(c *corev1.ContainerStatus) string {
	s := c.Name + ": " + d.formatState(&c.State)
	if c.Ready {
		s += " ready"
	}
	if c.Started != nil && *c.Started {
		s += " started"
	}
	s += fmt.Sprintf(" restarts=%d", c.RestartCount)
	if c.LastTerminationState.Terminated != nil {
		s += " last=" + d.formatState(&c.LastTerminationState)
	}
	if c.Image != "" {
		s += " image=" + c.Image
	}
	return s + "\n"
}

func (d *driver) formatState(st *corev1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running since " + d.rel(st.Running.StartedAt.Time)
	case st.Terminated != nil:
		t := st.Terminated
		s := fmt.Sprintf("terminated(%d %s", t.ExitCode, t.Reason)
		if !t.FinishedAt.IsZero() {
			s += " at " + d.rel(t.FinishedAt.Time)
		}
		if t.Message != "" {
			s += fmt.Sprintf(" %q", t.Message)
		}
		return s + ")"
	case st.Waiting != nil:
		s := "waiting"
		if st.Waiting.Reason != "" {
			s += " " + st.Waiting.Reason
		}
		if st.Waiting.Message != "" {
			s += fmt.Sprintf(" %q", st.Waiting.Message)
		}
		return s
	}
	return "none"
}
