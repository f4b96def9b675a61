package mesh

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestMain fails the run if a test leaves goroutines behind, but for a
// probe memberlist had in flight when its node was shut down: Shutdown
// does not wait for it, and it ends at its probe timer (up to 8 probe
// intervals while Lifeguard stretches them), which can outlast goleak's
// retries under -race on a loaded machine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).sendPingAndWaitForAck"))
}

var (
	key1 = bytes.Repeat([]byte{1}, 32)
	key2 = bytes.Repeat([]byte{2}, 16)
	key3 = bytes.Repeat([]byte{3}, 24)
)

// testConfig is DefaultConfig on loopback with a free port, probing
// faster so that a death is found within a couple of seconds.
func testConfig(name, site string, keys ...[]byte) Config {
	c := DefaultConfig()
	c.NodeName, c.Site, c.Keys = name, site, keys
	c.Bind = netip.MustParseAddrPort("127.0.0.1:0")
	c.ProbeInterval, c.ProbeTimeout = 300*time.Millisecond, 150*time.Millisecond
	c.GossipInterval, c.PushPullInterval = 50*time.Millisecond, 2*time.Second
	return c
}

func start(t *testing.T, cfg Config) *Mesh {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s) = %v", cfg.NodeName, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func sees(m *Mesh, want ...string) func() (bool, string) {
	return func() (bool, string) {
		got := m.Alive()
		return slices.Equal(got, want), fmt.Sprintf("%s sees %v, want %v", m.name, got, want)
	}
}

// site starts n nodes of site "s1" with keys, all joined to the first.
func site(t *testing.T, n int, keys ...[]byte) []*Mesh {
	t.Helper()
	var ms []*Mesh
	for i := range n {
		m := start(t, testConfig(fmt.Sprintf("n%d", i), "s1", keys...))
		if i > 0 {
			if _, err := m.Join([]netip.AddrPort{ms[0].Addr()}); err != nil {
				t.Fatalf("n%d joins: %v", i, err)
			}
		}
		ms = append(ms, m)
	}
	return ms
}

func TestJoinSeesPeers(t *testing.T) {
	ms := site(t, 3, key1)
	wait.For(t, 10*time.Second, "n0 sees both peers", sees(ms[0], "n1", "n2"))
	wait.For(t, 10*time.Second, "n1 sees both peers", sees(ms[1], "n0", "n2"))
	wait.For(t, 10*time.Second, "n2 sees both peers", sees(ms[2], "n0", "n1"))
	select {
	case <-ms[0].Changes():
	default:
		t.Error("no change signalled on n0 after two joins")
	}
	for _, p := range ms[0].Peers() {
		if !p.Addr.Addr().IsLoopback() || p.Addr.Port() == 0 {
			t.Errorf("peer %+v, want alive on a loopback port", p)
		}
	}
	if a := ms[1].Addr(); a.Addr() != netip.MustParseAddr("127.0.0.1") || a.Port() == 0 {
		t.Errorf("Addr() = %v, want 127.0.0.1 and the port picked", a)
	}
}

func TestDeadAndLeftPeers(t *testing.T) {
	ms := site(t, 4, key1)
	wait.For(t, 10*time.Second, "n0 sees all peers", sees(ms[0], "n1", "n2", "n3"))

	// n3 stops without a word: the others find it dead.
	if err := ms[3].Close(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 15*time.Second, "n3 declared dead", sees(ms[0], "n1", "n2"))
	wait.For(t, 5*time.Second, "n3 declared dead on n1", sees(ms[1], "n0", "n2"))

	// n2 leaves: the others drop it at once.
	if err := ms[2].Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "n2 gone", sees(ms[0], "n1"))
	wait.For(t, 5*time.Second, "n2 gone on n1", sees(ms[1], "n0"))
	if got := ms[0].Gone(); !slices.Equal(got, []string{"n2", "n3"}) {
		t.Errorf("n0: Gone() = %v, want [n2 n3]", got)
	}
	ms[0].ForgetGone(func(name string) bool { return name != "n2" })
	if got := ms[0].Gone(); !slices.Equal(got, []string{"n3"}) {
		t.Errorf("n0 forgot n2: Gone() = %v, want [n3]", got)
	}
}

func TestStrangersCannotJoin(t *testing.T) {
	ms := site(t, 2, key1)
	wait.For(t, 10*time.Second, "n0 sees n1", sees(ms[0], "n1"))
	for name, cfg := range map[string]Config{
		"another site, same key": testConfig("x1", "s2", key1),
		"same site, another key": testConfig("x2", "s1", key2),
	} {
		x := start(t, cfg)
		if n, err := x.Join([]netip.AddrPort{ms[0].Addr(), ms[1].Addr()}); err == nil || n != 0 {
			t.Errorf("%s: Join = %d, %v; want refused", name, n, err)
		}
		if got := x.Alive(); len(got) != 0 {
			t.Errorf("%s: sees %v, want no one", name, got)
		}
	}
	// The site's nodes still see only each other.
	if got := ms[0].Alive(); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("n0 sees %v after the strangers tried, want [n1]", got)
	}
}

func TestKeyRotation(t *testing.T) {
	ms := site(t, 2, key1)
	wait.For(t, 10*time.Second, "n0 sees n1", sees(ms[0], "n1"))
	// Each step on every node before the next: add key2, make it
	// primary, drop key1.
	for _, keys := range [][][]byte{{key1, key2}, {key2, key1}, {key2}} {
		for _, m := range ms {
			if err := m.SetKeys(keys); err != nil {
				t.Fatalf("SetKeys on %s: %v", m.name, err)
			}
		}
		if got := ms[0].keyring.GetPrimaryKey(); !bytes.Equal(got, keys[0]) {
			t.Fatalf("primary key %x, want %x", got, keys[0])
		}
		if n := len(ms[0].keyring.GetKeys()); n != len(keys) {
			t.Fatalf("%d keys installed, want %d", n, len(keys))
		}
	}
	// A node with the new key joins; one with only the old cannot.
	newcomer := start(t, testConfig("n2", "s1", key2))
	if _, err := newcomer.Join([]netip.AddrPort{ms[1].Addr()}); err != nil {
		t.Fatalf("a node with the new key: Join = %v", err)
	}
	wait.For(t, 10*time.Second, "n0 sees the newcomer", sees(ms[0], "n1", "n2"))
	old := start(t, testConfig("n3", "s1", key1))
	if _, err := old.Join([]netip.AddrPort{ms[0].Addr()}); err == nil {
		t.Error("a node with only the dropped key joined")
	}
	if err := ms[0].SetKeys([][]byte{[]byte("short")}); err == nil {
		t.Error("SetKeys took a 5-byte key")
	}
	if err := ms[0].SetKeys(nil); err == nil {
		t.Error("SetKeys took no key")
	}
}

func TestValidate(t *testing.T) {
	good := testConfig("n0", "s1", key1, key3)
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"no name":          func(c *Config) { c.NodeName = "" },
		"no site":          func(c *Config) { c.Site = "" },
		"long site":        func(c *Config) { c.Site = strings.Repeat("s", maxSiteLen+1) },
		"no address":       func(c *Config) { c.Bind = netip.AddrPort{} },
		"no key":           func(c *Config) { c.Keys = nil },
		"bad key":          func(c *Config) { c.Keys = [][]byte{key1, make([]byte, 20)} },
		"timeout too long": func(c *Config) { c.ProbeTimeout = c.ProbeInterval },
		"no suspicion":     func(c *Config) { c.SuspicionMult = 0 },
		"no gossip":        func(c *Config) { c.GossipNodes = 0 },
	} {
		c := good
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil", name)
		}
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[WARN] memberlist: label mismatch from=10.0.0.9:7946\n", slog.LevelWarn, "mesh: label mismatch from=10.0.0.9:7946"},
		{"[ERR] memberlist: failed to decrypt", slog.LevelError, "mesh: failed to decrypt"},
		{"[DEBUG] memberlist: probing n1", slog.LevelDebug, "mesh: probing n1"},
		{"[INFO] memberlist: joined", slog.LevelInfo, "mesh: joined"},
		{"no tag at all\n", slog.LevelInfo, "mesh: no tag at all"},
	} {
		if level, msg := parseLine(c.line); level != c.level || msg != c.msg {
			t.Errorf("parseLine(%q) = %v, %q; want %v, %q", c.line, level, msg, c.level, c.msg)
		}
	}
}

func TestLogWriter(t *testing.T) {
	rec := testlog.NewRecorder(t, slog.LevelInfo)
	w := newLogWriter(slog.New(rec), time.Minute)
	now := time.Unix(1000, 0)
	w.now = func() time.Time { return now }
	mismatch := "[WARN] memberlist: label mismatch from=10.0.0.9:7946\n"
	for _, line := range []string{mismatch, mismatch, "[DEBUG] memberlist: probing n1\n", "[ERR] memberlist: failed to decrypt\n"} {
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if n := rec.Count("mesh: label mismatch from=10.0.0.9:7946"); n != 1 {
		t.Errorf("a line said twice at once logged %d times, want once", n)
	}
	if rec.Count("mesh: probing n1") != 0 || rec.Count("mesh: failed to decrypt") != 1 {
		t.Error("a debug line logged at info, or an error not logged")
	}
	now = now.Add(2 * time.Minute) // a period later: logged again
	w.Write([]byte(mismatch))
	if n := rec.Count("mesh: label mismatch from=10.0.0.9:7946"); n != 2 {
		t.Errorf("the line logged %d times after a period, want 2", n)
	}
	// A nil logger discards.
	if n, err := newLogWriter(nil, time.Minute).Write([]byte("[ERR] x")); n != 7 || err != nil {
		t.Errorf("Write to a nil logger = %d, %v", n, err)
	}
}

// countingTransport counts the bytes of packets a transport sends.
type countingTransport struct {
	*memberlist.NetTransport
	sent atomic.Int64
}

func (c *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	c.sent.Add(int64(len(b)))
	return c.NetTransport.WriteTo(b, addr)
}

func (c *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	c.sent.Add(int64(len(b)))
	return c.NetTransport.WriteToAddress(b, a)
}

func TestTransport(t *testing.T) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTransport{NetTransport: nt}
	cfg := testConfig("n1", "s1", key1)
	cfg.Bind = netip.AddrPortFrom(cfg.Bind.Addr(), uint16(nt.GetAutoBindPort()))
	cfg.Transport = ct
	n1 := start(t, cfg)
	n0 := start(t, testConfig("n0", "s1", key1))
	if _, err := n1.Join([]netip.AddrPort{n0.Addr()}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "n0 sees n1 through its transport", sees(n0, "n1"))
	wait.For(t, 10*time.Second, "n1 probes n0 over UDP", func() (bool, string) {
		return ct.sent.Load() > 0, fmt.Sprintf("%d bytes sent", ct.sent.Load())
	})
	if a := n1.Addr(); a != cfg.Bind {
		t.Errorf("Addr() = %v, want %v", a, cfg.Bind)
	}
}
