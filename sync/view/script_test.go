package view

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata scripts")

// TestScripts replays the scripts of testdata/*.txt. A script is a series
// of blocks: commands, one a line, then "----" and the output they are
// expected to print, up to a blank line. Lines starting with "#" between
// blocks are comments. go test -run TestScripts -rewrite rewrites the
// outputs. The commands are listed in (*scriptRun).run.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

type block struct {
	prelude []string // comments and blank lines before the block
	cmds    []string
	line    int
	want    []string
}

func parseScript(t *testing.T, text string) (blocks []block, trailer []string) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var b block
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case len(b.cmds) == 0 && (l == "" || strings.HasPrefix(l, "#")):
			b.prelude = append(b.prelude, l)
		case l == "----":
			if len(b.cmds) == 0 {
				t.Fatalf("line %d: ---- without commands", i+1)
			}
			for i++; i < len(lines) && lines[i] != ""; i++ {
				b.want = append(b.want, lines[i])
			}
			blocks = append(blocks, b)
			b = block{}
		default:
			if len(b.cmds) == 0 {
				b.line = i + 1
			}
			b.cmds = append(b.cmds, l)
		}
	}
	if len(b.cmds) > 0 {
		t.Fatalf("line %d: commands without ----", b.line)
	}
	return blocks, b.prelude
}

func runScript(t *testing.T, file string) {
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks, trailer := parseScript(t, string(text))
	r := &scriptRun{t: t}
	r.config(nil)
	var out strings.Builder
	for _, b := range blocks {
		got := r.block(b)
		for _, l := range b.prelude {
			out.WriteString(l + "\n")
		}
		out.WriteString(strings.Join(b.cmds, "\n") + "\n----\n")
		for _, l := range got {
			out.WriteString(l + "\n")
		}
		out.WriteString("\n")
		if !*rewrite && !slices.Equal(got, b.want) {
			t.Errorf("%s:%d:\n%s\n=\n%s\nwant\n%s", file, b.line, strings.Join(b.cmds, "\n"),
				strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
	}
	for _, l := range trailer {
		out.WriteString(l + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptRun is the state of one script: a world and the nodes' edges.
type scriptRun struct {
	t     *testing.T
	w     *world
	edges map[string]*edge
	out   []string
}

func (r *scriptRun) printf(format string, args ...any) {
	r.out = append(r.out, fmt.Sprintf(format, args...))
}

func (r *scriptRun) block(b block) []string {
	r.out = nil
	wrote := false
	for _, l := range b.cmds {
		if r.run(l) {
			wrote = true
		}
	}
	if wrote {
		r.printf("rev %d", r.w.rev)
	}
	return r.out
}

func (r *scriptRun) edge(node string) *edge {
	e := r.edges[node]
	if e == nil {
		e = r.w.newEdge(node)
		r.edges[node] = e
	}
	return e
}

func (r *scriptRun) config(args []string) {
	cfg := DefaultConfig()
	for _, a := range args {
		name, v, _ := strings.Cut(a, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			r.t.Fatalf("config %s: %v", a, err)
		}
		switch name {
		case "history":
			cfg.HistoryLimit = n
		case "changes":
			cfg.MaxBatchChanges = n
		case "bytes":
			cfg.MaxBatchBytes = n
		default:
			r.t.Fatalf("config: unknown %s", name)
		}
	}
	r.w = newWorld(r.t, cfg)
	r.edges = map[string]*edge{}
}

// run runs one command line and reports whether it wrote to the store.
//
//	config [history=N] [changes=N] [bytes=N]  a new, empty world
//	node|secret|configmap|sa|service|slice|event NAME  put an object
//	node NAME [site=S] [garbage]  put a Node, in site S (the label) or none
//	pod NS/NAME [node=N] [secret=a,b] [cm=] [proj-secret=] [proj-cm=]
//	    [env-secret=] [env-cm=] [from-secret=] [from-cm=] [pull=] [sa=] [garbage]
//	delete RESOURCE/NS/NAME
//	tx: CMD; CMD; ...             several writes in one revision
//	reset [bare]                  Reset the index to the store now (bare: without
//	                              the bytes of configmaps, secrets and service
//	                              accounts, as the hub does)
//	resume NODE [from=REV]        open a session (from the edge's revision)
//	inventory NODE [KEY@REV ...]  open a session from the edge's inventory
//	next NODE                     one Next
//	drain NODE                    Next until it has nothing new
//	cut NODE N                    Next, of which the node applies N changes; close
//	close NODE                    close the session; the edge keeps its state
//	view NODE                     the index's view of NODE
//	check NODE                    compare what the edge holds with the view
//	stats
//	held                          the bytes the index holds
//	loads NODE                    what the node's shell did, since the last
//	                              loads, of the puts that came without objects
func (r *scriptRun) run(line string) bool {
	if rest, ok := strings.CutPrefix(line, "tx:"); ok {
		var changes []change
		for _, c := range strings.Split(rest, ";") {
			changes = append(changes, r.change(strings.Fields(c)))
		}
		r.w.commit(changes...)
		return true
	}
	f := strings.Fields(line)
	switch f[0] {
	case "config":
		r.config(f[1:])
	case "node", "pod", "secret", "configmap", "sa", "service", "slice", "event", "delete":
		r.w.commit(r.change(f))
		return true
	case "reset":
		r.w.resetRaw = len(f) < 2 || f[1] != "bare"
		r.w.reset()
		r.printf("reset at %d", r.w.rev)
	case "resume":
		e := r.edge(f[1])
		from := e.rev
		if len(f) > 2 {
			v, _ := strings.CutPrefix(f[2], "from=")
			from, _ = strconv.ParseInt(v, 10, 64)
		}
		if e.s != nil {
			e.s.Close()
			e.s = nil
		}
		s, changes, rev, err := r.w.x.Resume(e.node, from)
		if err != nil {
			r.printf("error: %v", err)
			return false
		}
		e.s = s
		r.result(e, changes, rev)
	case "inventory":
		e := r.edge(f[1])
		if len(f) > 2 {
			e.holds = map[wire.Key]int64{}
			for _, a := range f[2:] {
				k, rev, _ := strings.Cut(a, "@")
				n, _ := strconv.ParseInt(rev, 10, 64)
				e.holds[key(k)] = n
			}
		}
		if e.s != nil {
			e.s.Close()
		}
		s, changes, rev := r.w.x.ResumeFromInventory(e.node, e.inventory())
		e.s = s
		r.result(e, changes, rev)
	case "next", "drain":
		e := r.edge(f[1])
		if e.s == nil {
			r.printf("error: no session")
			return false
		}
		for {
			prev := e.rev
			changes, rev, err := e.s.Next()
			if err != nil {
				r.printf("error: %v", err)
				return false
			}
			if f[0] == "drain" && len(changes) == 0 && rev == prev {
				break
			}
			r.result(e, changes, rev)
			if f[0] == "next" {
				break
			}
		}
	case "cut":
		// One Next; the connection breaks after the first N changes.
		e := r.edge(f[1])
		n, _ := strconv.Atoi(f[2])
		changes, rev, err := e.s.Next()
		if err != nil {
			r.printf("error: %v", err)
			return false
		}
		n = min(n, len(changes))
		r.printChanges(changes[:n])
		r.printf("-x cut after %d of %d changes (revision %d): the node stays at %d", n, len(changes), rev, e.rev)
		e.applyPrefix(changes, n)
		e.s.Close()
		e.s = nil
	case "close":
		if e := r.edge(f[1]); e.s != nil {
			e.s.Close()
			e.s = nil
		}
	case "view":
		for _, en := range r.w.x.View(f[1]) {
			r.printf("%s@%d", en.Key, en.Revision)
		}
	case "check":
		e := r.edge(f[1])
		want := inventoryMap(r.w.x.View(e.node))
		if d := diffViews(e.holds, want); d != "" {
			r.printf("edge %s differs from its view:%s", e.node, d)
		} else if d := diffViews(want, r.w.viewAt(r.w.rev, e.node)); d != "" {
			r.printf("view of %s differs from the world's:%s", e.node, d)
		} else {
			r.printf("ok: %d objects", len(want))
		}
	case "stats":
		s := r.w.x.Stats()
		r.printf("revision %d, resume from %d, history %d, objects %d, nodes %d, sessions %d, undecodable pods %d",
			s.Revision, s.ResumeFrom, s.History, s.Objects, s.Nodes, s.Sessions, s.UndecodablePods)
		if s.Sites+s.SiteNodes > 0 || s.UndecodableNodes > 0 {
			r.printf("sites %d of %d Nodes, undecodable Nodes %d", s.Sites, s.SiteNodes, s.UndecodableNodes)
		}
	case "held":
		s := r.w.x.Stats()
		r.printf("%d objects, %d bytes held; %d without their bytes", s.Objects, s.ObjectBytes, s.Unheld)
	case "loads":
		e := r.edge(f[1])
		for _, l := range []struct {
			what string
			keys []string
		}{{"read from the store", e.loaded}, {"found in the index", e.found}, {"dropped", e.dropped}} {
			for _, k := range l.keys {
				r.printf("%s %s", l.what, k)
			}
		}
		e.loaded, e.found, e.dropped = nil, nil, nil
	default:
		r.t.Fatalf("unknown command %q", line)
	}
	return false
}

func (r *scriptRun) printChanges(changes []Change) {
	for _, c := range changes {
		if c.Op == wire.OpPut {
			r.printf("put %s@%d", c.Key, c.Revision)
		} else {
			r.printf("del %s@%d", c.Key, c.Revision)
		}
	}
}

func (r *scriptRun) result(e *edge, changes []Change, rev int64) {
	r.printChanges(changes)
	note := ""
	if rev == 0 {
		note = " (a part: more follow)"
	}
	r.printf("-> %d%s", rev, note)
	e.apply(changes, rev)
}

var scriptResources = map[string]string{
	"node": wire.ResourceNodes, "pod": wire.ResourcePods, "secret": wire.ResourceSecrets,
	"configmap": wire.ResourceConfigMaps, "sa": wire.ResourceServiceAccounts,
	"service": wire.ResourceServices, "slice": wire.ResourceEndpointSlices, "event": wire.ResourceEvents,
}

func (r *scriptRun) change(f []string) change {
	if f[0] == "delete" {
		return change{key: key(f[1]), deleted: true}
	}
	res, ok := scriptResources[f[0]]
	if !ok {
		r.t.Fatalf("unknown resource %q", f[0])
	}
	ns, name, ok := strings.Cut(f[1], "/")
	if !ok {
		ns, name = "", f[1]
	}
	c := change{key: wire.Key{Resource: res, Namespace: ns, Name: name}}
	if res == wire.ResourceNodes {
		c.node = &nodeSpec{}
		for _, a := range f[2:] {
			switch v, ok := strings.CutPrefix(a, "site="); {
			case ok:
				c.node.site = v
			case a == "garbage":
				c.node.garbage = true
			default:
				r.t.Fatalf("node: unknown %q", a)
			}
		}
		return c
	}
	if res != wire.ResourcePods {
		return c
	}
	p := &podSpec{}
	for _, a := range f[2:] {
		name, v, _ := strings.Cut(a, "=")
		var l []string
		if v != "" {
			l = strings.Split(v, ",")
		}
		switch name {
		case "node":
			p.node = v
		case "secret":
			p.secrets = l
		case "cm":
			p.configMaps = l
		case "proj-secret":
			p.projSecrets = l
		case "proj-cm":
			p.projConfigMaps = l
		case "env-secret":
			p.envSecrets = l
		case "env-cm":
			p.envConfigMaps = l
		case "from-secret":
			p.fromSecrets = l
		case "from-cm":
			p.fromConfigMaps = l
		case "pull":
			p.pull = l
		case "sa":
			p.sa = v
		case "garbage":
			p.garbage = true
		default:
			r.t.Fatalf("pod: unknown %q", a)
		}
	}
	c.spec = p
	return c
}
