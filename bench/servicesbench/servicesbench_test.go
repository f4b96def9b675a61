package servicesbench

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/dns"
	"github.com/outpost-mesh/outpost/netd/services"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Binary, ok.EdgeBinary = "/bin/outpost", "/bin/outpost-edge"
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	q := QuickConfig()
	q.Binary = ok.Binary
	if err := q.Validate(); err != nil {
		t.Fatalf("quick: %v", err)
	}
	for name, bad := range map[string]func(*Config){
		"no binary":      func(c *Config) { c.Binary = "" },
		"no edge binary": func(c *Config) { c.EdgeBinary = "" },
		"no sizes":       func(c *Config) { c.Sizes = nil },
		"size twice":     func(c *Config) { c.Sizes = []int{10, 10} },
		"huge size":      func(c *Config) { c.Sizes = []int{maxServices + 1} },
		"zero size":      func(c *Config) { c.ConnectSizes = []int{0} },
		"no runs":        func(c *Config) { c.Runs = 0 },
		"no dns clients": func(c *Config) { c.DNSClients = 0 },
		"no duration":    func(c *Config) { c.DNSDuration = 0 },
	} {
		c := ok
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate = nil", name)
		}
	}
	noAgent := ok
	noAgent.Binary, noAgent.EdgeBinary, noAgent.Agent, noAgent.RealAgent = "", "", false, false
	if err := noAgent.Validate(); err != nil {
		t.Errorf("no binary, no agent: %v", err)
	}
}

func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		got, want netip.Addr
	}{
		{clusterIP(0), netip.MustParseAddr("10.96.0.1")},
		{clusterIP(255), netip.MustParseAddr("10.96.1.0")},
		{backend(0, 0), netip.MustParseAddr("10.244.0.1")},
		{backend(0, 3), netip.MustParseAddr("10.244.0.4")},
		{backend(1, 0), netip.MustParseAddr("10.244.0.5")},
		{backend(maxServices-1, 3), netip.MustParseAddr("10.244.250.0")},
	} {
		if tc.got != tc.want {
			t.Errorf("got %v, want %v", tc.got, tc.want)
		}
	}
	if !serviceCIDR.Contains(clusterIP(maxServices-1)) || !clusterCIDR.Contains(backend(maxServices-1, 3)) {
		t.Error("the largest cluster leaves its CIDRs")
	}
}

func TestGenerate(t *testing.T) {
	const n = 1000
	svcs, eps := Generate(n, 0)
	if len(svcs) != n || len(eps) != n {
		t.Fatalf("%d Services, %d slices", len(svcs), len(eps))
	}
	tab, err := buildTable(compact(svcs, eps))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for i := range n {
		f := tab[services.Key{Addr: clusterIP(i), Port: servicePort, Proto: services.TCP}]
		if f == nil || f.Kind != services.ClusterIP || len(f.Backends) != backends {
			t.Fatalf("Service %d: %+v", i, f)
		}
		for j, b := range f.Backends {
			if b.Addr.Port() != backendPort || seen[b.Addr.Addr()] {
				t.Fatalf("Service %d backend %d: %v, seen before %v", i, j, b.Addr, seen[b.Addr.Addr()])
			}
			seen[b.Addr.Addr()] = true
		}
	}
	svcs1, eps1 := Generate(n, 1)
	tab1, err := buildTable(compact(svcs1, eps1))
	if err != nil {
		t.Fatal(err)
	}
	changed, removed := services.Diff(tab, tab1)
	if len(changed) != 1 || len(removed) != 0 || changed[0].Key.Addr != clusterIP(n-1) {
		t.Fatalf("generation 1 changes %v, removes %v; want Service %d's frontend only", changed, removed, n-1)
	}
	csvcs, ceps := compact(svcs, eps)
	z := dns.NewZone(domain, csvcs, ceps)
	if z.Len() == 0 {
		t.Fatal("empty zone")
	}
}

func TestObjects(t *testing.T) {
	svcs, eps := Generate(50, 0)
	var b bytes.Buffer
	if err := writeObjects(&b, svcs, eps); err != nil {
		t.Fatal(err)
	}
	sr, er, err := readObjects(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	gs, ge, err := decodeObjects(sr, er)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != len(svcs) || len(ge) != len(eps) {
		t.Fatalf("read back %d Services and %d slices", len(gs), len(ge))
	}
	if gs[7].Name != svcs[7].Name || gs[7].ClusterIP != svcs[7].Spec.ClusterIP || ge[7].Endpoints[3].Addresses[0] != eps[7].Endpoints[3].Addresses[0] {
		t.Errorf("read back %+v, want %+v", gs[7], svcs[7])
	}
	a, err := buildTable(compact(svcs, eps))
	if err != nil {
		t.Fatal(err)
	}
	c, err := buildTable(gs, ge)
	if err != nil {
		t.Fatal(err)
	}
	if changed, removed := services.Diff(a, c); len(changed)+len(removed) != 0 {
		t.Errorf("decoded objects build another table: %d changed, %d removed", len(changed), len(removed))
	}
	for name, bad := range map[string][]byte{
		"short header": b.Bytes()[:3],
		"short record": b.Bytes()[:20],
		"bad kind":     {9, 0, 0, 0, 0},
		"huge record":  {1, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, _, err := readObjects(bytes.NewReader(bad)); !errors.Is(err, errObjects) {
			t.Errorf("%s: err = %v, want errObjects", name, err)
		}
	}
}

func FuzzReadObjects(f *testing.F) {
	svcs, eps := Generate(2, 0)
	var b bytes.Buffer
	if err := writeObjects(&b, svcs, eps); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte{1, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		sr, er, err := readObjects(bytes.NewReader(data))
		if err != nil {
			return
		}
		n := 0
		for _, r := range append(sr, er...) {
			n += 5 + len(r)
		}
		if n != len(data) {
			t.Fatalf("records of %d bytes from %d", n, len(data))
		}
		decodeObjects(sr, er) // must not panic
	})
}

func TestParseStatus(t *testing.T) {
	status := []byte("Name:\toutpost\nVmHWM:\t   94400 kB\nVmRSS:\t   85500 kB\n")
	if v, err := parseStatus(status, "VmRSS"); err != nil || v != 85500<<10 {
		t.Errorf("VmRSS = %d, %v", v, err)
	}
	if v, err := parseStatus(status, "VmHWM"); err != nil || v != 94400<<10 {
		t.Errorf("VmHWM = %d, %v", v, err)
	}
	if _, err := parseStatus(status, "VmSwap"); err == nil {
		t.Error("missing field: nil error")
	}
	if _, err := parseStatus([]byte("VmRSS:\t12 MB\n"), "VmRSS"); err == nil {
		t.Error("other unit: nil error")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{{nil, 0}, {[]time.Duration{3}, 3}, {[]time.Duration{5, 1, 3}, 3}, {[]time.Duration{4, 1, 3, 2}, 2}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// sampleResult is a full run's result: eBPF programs 10,000 Services in
// ebpf, connect p50 goes from 20µs to at10k.
func sampleResult(ebpf, at10k time.Duration, peak uint64) *Result {
	lat := func(p50 time.Duration) report.Latency {
		return report.Latency{Count: 100, P50: p50, P90: 2 * p50, P99: 3 * p50, Max: 4 * p50}
	}
	conn := func(n int, p50 time.Duration) ConnectResult {
		return ConnectResult{Services: n, Paths: []PathLatency{
			{Path: ModeDirect, Connect: lat(18 * time.Microsecond), Backends: [4]int{25, 25, 25, 25}},
			{Path: ModeEBPF, Connect: lat(p50), Backends: [4]int{24, 26, 25, 25}},
			{Path: ModeNftables, Connect: lat(30 * time.Microsecond), Backends: [4]int{25, 25, 25, 25}},
		}}
	}
	return &Result{
		Program: []ProgramResult{
			{Services: 1000, Build: 9 * time.Millisecond, EBPF: SyncTimes{First: 4 * time.Millisecond, One: time.Millisecond}, Nftables: SyncTimes{First: 200 * time.Millisecond, One: 10 * time.Millisecond}},
			{Services: 10000, Build: 90 * time.Millisecond, EBPF: SyncTimes{First: ebpf, One: time.Millisecond}, Nftables: SyncTimes{First: 3 * time.Second, One: 50 * time.Millisecond}},
		},
		Connect: []ConnectResult{conn(10, 20*time.Microsecond), conn(10000, at10k)},
		DNS: &DNSResult{Services: 10000, Names: 70000, Clients: 4, Kinds: []DNSQuery{
			{Kind: QueryCluster, Queries: 100000, PerSec: 33000, Latency: lat(70 * time.Microsecond)},
		}},
		Agent: &AgentResult{Services: 10000, Total: time.Second, CPU: 1500 * time.Millisecond, IdleRSS: 40e6, PeakRSS: peak},
		Load:  []report.LoadAvg{{Phase: "start", Load: [3]float64{1, 2, 3}}},
	}
}

func TestEvaluate(t *testing.T) {
	statuses := func(tg []report.Target) string {
		var s []string
		for _, x := range tg {
			s = append(s, x.Status)
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		name        string
		ebpf, at10k time.Duration
		peak        uint64
		want        string
	}{
		{"all met", 40 * time.Millisecond, 21 * time.Microsecond, 55e6, "met met met met"},
		{"slow sync", 1500 * time.Millisecond, 21 * time.Microsecond, 55e6, "MISSED MISSED met met"},
		{"not 50x", 100 * time.Millisecond, 21 * time.Microsecond, 55e6, "met MISSED met met"},
		{"connect slower", 40 * time.Millisecond, 23 * time.Microsecond, 55e6, "met met MISSED met"},
		{"connect faster", 40 * time.Millisecond, 17 * time.Microsecond, 55e6, "met met MISSED met"},
		{"work alone over", 40 * time.Millisecond, 21 * time.Microsecond, 101e6, "met met met MISSED"},
		{"stand-in's idle decides", 40 * time.Millisecond, 21 * time.Microsecond, 80e6, "met met met n/a"},
	} {
		if got := statuses(evaluate(sampleResult(tc.ebpf, tc.at10k, tc.peak))); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	quick := sampleResult(time.Millisecond, 0, 0)
	quick.Program, quick.Connect[1].Services, quick.Agent.Services = quick.Program[:1], 1000, 1000
	if got := statuses(evaluate(quick)); got != "n/a n/a n/a n/a" {
		t.Errorf("quick run: %s, want all n/a", got)
	}
}

func TestConnectChange(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		few, directFew, many, directMany time.Duration
		want                             float64
	}{
		{20 * us, 10 * us, 20 * us, 10 * us, 0},
		{20 * us, 10 * us, 22 * us, 10 * us, 10},
		{20 * us, 10 * us, 24 * us, 12 * us, 0}, // the machine slowed every path alike
		{20 * us, 10 * us, 18 * us, 10 * us, -10},
	} {
		if got := connectChange(tc.few, tc.directFew, tc.many, tc.directMany); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("connectChange(%v, %v, %v, %v) = %v, want %v", tc.few, tc.directFew, tc.many, tc.directMany, got, tc.want)
		}
	}
}

func TestRender(t *testing.T) {
	var b strings.Builder
	cfg := DefaultConfig()
	if err := NewReport(cfg, sampleResult(40*time.Millisecond, 25*time.Microsecond, 55e6)).Render(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"10,000    90.0ms", "40.0ms", "3.00s", "75x", "50x",
		"10,000        ebpf  25.0µs", "+7.00µs", "24/26/25/25",
		"cluster name", "33.0k/s",
		"1.00s  1.50s   40.0 MB   55.0 MB",
		`target "eBPF connect latency p50 through a ClusterIP within 10% from 10 to 10,000 Services, against direct" MISSED: +25.0%: 20.0µs at 10, 25.0µs at 10,000; direct 18.0µs, 18.0µs`,
		"machine\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestQuickRun runs the quick benchmark end to end in a network namespace
// of its own, without the agent's stand-in (it needs the outpost binary);
// set OUTPOST_BENCH_SERVICES=1 to run it. Its figures are not held to the
// targets here: that is the benchmark's job.
func TestQuickRun(t *testing.T) {
	if os.Getenv("OUTPOST_BENCH_SERVICES") == "" {
		t.Skip("set OUTPOST_BENCH_SERVICES=1 to run the services benchmark")
	}
	if os.Geteuid() != 0 {
		t.Skip(ErrNotRoot)
	}
	if !netnstest.Enter(t) {
		return
	}
	cfg := QuickConfig()
	cfg.Agent = false
	if err := Check(cfg); err != nil {
		t.Skip(err)
	}
	var progress strings.Builder
	rep, err := Run(t.Context(), cfg, &progress)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.Render(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", b.String())
	res := rep.Result
	if len(res.Program) != 1 || res.Program[0].EBPF.First <= 0 || res.Program[0].Nftables.First <= 0 || len(res.Program[0].EBPF.Runs) != cfg.Runs {
		t.Errorf("programming: %+v", res.Program)
	}
	if len(res.Connect) != len(cfg.ConnectSizes) {
		t.Fatalf("%d connect results", len(res.Connect))
	}
	for _, c := range res.Connect {
		for _, p := range c.Paths {
			sum := 0
			for _, n := range p.Backends {
				sum += n
			}
			if p.Connect.Count != cfg.Connects || sum != cfg.Connects {
				t.Errorf("%d Services, %s: %d connects, %d by backend", c.Services, p.Path, p.Connect.Count, sum)
			}
			if p.Path != ModeDirect && slicesMin(p.Backends[:]) == 0 {
				t.Errorf("%d Services, %s: a backend got no connection: %v", c.Services, p.Path, p.Backends)
			}
		}
	}
	if res.DNS == nil || len(res.DNS.Kinds) != 2 || res.DNS.Kinds[0].Queries == 0 || res.DNS.Kinds[1].Queries == 0 {
		t.Errorf("dns: %+v", res.DNS)
	}
	// Nothing is left: the run's namespaces went with their files, the
	// bpffs and the cgroup were taken away.
	own, err := ownCgroup()
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(own)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "outpost-bench-services-") {
			t.Errorf("cgroup %s left behind", e.Name())
		}
	}
}

func slicesMin(s []int) int {
	m := s[0]
	for _, v := range s {
		m = min(m, v)
	}
	return m
}
