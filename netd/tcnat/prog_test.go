package tcnat

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// pkt describes a test packet.
type pkt struct {
	src, dst netip.AddrPort
	proto    uint8 // 6, 17, 132
	flags    uint8 // TCP flags
	frag     bool  // IPv4: more fragments
	hopByHop bool  // IPv6: a hop-by-hop options header first
	noCsum   bool  // UDP over IPv4 without checksum
}

// bytes returns p as an Ethernet frame with correct checksums.
func (p pkt) bytes() []byte {
	var l4 []byte
	switch p.proto {
	case 6:
		l4 = make([]byte, 20+4)
		l4[12] = 5 << 4
		l4[13] = p.flags
		copy(l4[20:], "data")
	default:
		l4 = make([]byte, 8+4)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		copy(l4[8:], "data")
	}
	binary.BigEndian.PutUint16(l4[0:], p.src.Port())
	binary.BigEndian.PutUint16(l4[2:], p.dst.Port())
	if csOff := l4CsumOff(p.proto); csOff > 0 && !p.noCsum {
		cs := ^fold(pseudoSum(p.src.Addr(), p.dst.Addr(), p.proto, len(l4)) + sum(l4))
		if cs == 0 && p.proto == 17 {
			cs = 0xffff
		}
		binary.BigEndian.PutUint16(l4[csOff:], cs)
	}
	frame := make([]byte, 14)
	var ip []byte
	if p.src.Addr().Is4() {
		binary.BigEndian.PutUint16(frame[12:], 0x0800)
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		if p.frag {
			ip[6] = 0x20
		}
		ip[8] = 64
		ip[9] = p.proto
		s, d := p.src.Addr().As4(), p.dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip)))
	} else {
		binary.BigEndian.PutUint16(frame[12:], 0x86dd)
		ip = make([]byte, 40)
		ip[0] = 0x60
		ip[6] = p.proto
		ip[7] = 64
		s, d := p.src.Addr().As16(), p.dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		if p.hopByHop {
			ip[6] = 0
			ip = append(ip, p.proto, 0, 1, 4, 0, 0, 0, 0) // PadN
		}
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40+len(l4)))
	}
	return append(append(frame, ip...), l4...)
}

func l4CsumOff(proto uint8) int {
	switch proto {
	case 6:
		return 16
	case 17:
		return 6
	}
	return 0
}

func sum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

func pseudoSum(src, dst netip.Addr, proto uint8, n int) uint32 {
	return sum(src.AsSlice()) + sum(dst.AsSlice()) + uint32(proto) + uint32(n)
}

// parsed is what the checks read back from a frame: its addresses, and
// whether its checksums hold.
type parsed struct {
	src, dst netip.AddrPort
	csumOK   bool
	l4Csum   uint16
}

func parseFrame(t *testing.T, frame []byte) parsed {
	t.Helper()
	var src, dst netip.Addr
	var proto uint8
	var l4 []byte
	ok := true
	if binary.BigEndian.Uint16(frame[12:]) == 0x0800 {
		ip := frame[14:34]
		ok = fold(sum(ip)) == 0xffff
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		proto, l4 = ip[9], frame[34:]
	} else {
		ip := frame[14:54]
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		proto, l4 = ip[6], frame[54:]
	}
	off := l4CsumOff(proto)
	cs := binary.BigEndian.Uint16(l4[off:])
	if !(proto == 17 && cs == 0) {
		ok = ok && fold(pseudoSum(src, dst, proto, len(l4))+sum(l4)) == 0xffff
	}
	return parsed{
		src:    netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:])),
		dst:    netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:])),
		csumOK: ok, l4Csum: cs,
	}
}

// run runs prog on frame and returns its verdict, the frame after, and
// the mark.
func run(t *testing.T, prog *ebpf.Program, frame []byte) (int32, []byte, uint32) {
	t.Helper()
	ret, out, mark, err := tryRun(prog, frame)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return ret, out, mark
}

func tryRun(prog *ebpf.Program, frame []byte) (int32, []byte, uint32, error) {
	out := make([]byte, len(frame)+256)
	// struct __sk_buff up to queue_mapping: len and pkt_type must be
	// zero, mark is read back.
	ctxOut := make([]byte, 256) // at least sizeof(struct __sk_buff)
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame, DataOut: out, Context: make([]byte, 16), ContextOut: ctxOut})
	return int32(ret), out[:len(frame)], binary.NativeEndian.Uint32(ctxOut[8:]), err
}

// TestPrograms runs the programs on packets (BPF_PROG_TEST_RUN): what is
// translated and how, checksums included, and what passes untouched.
func TestPrograms(t *testing.T) {
	needKernel(t)
	cfg := DefaultConfig()
	cfg.FlowEntries, cfg.AffinityEntries = 64, 64
	maps := map[string]*ebpf.Map{}
	for name, spec := range mapSpecs(&cfg) {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		maps[name] = m
	}
	in, err := load(directions[0], cfg.MasqueradeMark, maps)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := load(directions[1], cfg.MasqueradeMark, maps)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	sticky := nodePort("192.168.1.10:30082", services.TCP, "10.42.1.1:80", "10.42.1.2:80", "10.42.1.3:80", "10.42.1.4:80")
	sticky.Affinity = 3 * time.Hour
	spread := nodePort("192.168.1.10:30083", services.TCP, "10.42.1.1:80", "10.42.1.2:80", "10.42.1.3:80", "10.42.1.4:80")
	local := nodePort("192.168.1.10:30081", services.TCP, "10.42.0.7:8080")
	local.ExternalLocal = true
	tab := bpftest.Table(
		nodePort("192.168.1.10:30080", services.TCP, "10.42.0.5:8080"),
		nodePort("192.168.1.10:30053", services.UDP, "10.42.0.5:5353"),
		nodePort("[fd00::10]:30080", services.TCP, "[fd42::5]:8080"),
		nodePort("192.168.1.10:30099", services.TCP),
		local, sticky, spread,
	)
	a := &lbplan.IDs{}
	p := makePlan(nil, tab, a)
	if err := p.Apply(maps[mapFrontends], maps[mapBackends], "frontends"); err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	const syn, ack = 0x02, 0x10

	for _, tc := range []struct {
		name    string
		p       pkt
		backend string // "" untouched
		mark    bool
	}{
		{"v4 TCP SYN", pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30080"), proto: 6, flags: syn}, "10.42.0.5:8080", true},
		{"v4 TCP ACK of the flow", pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30080"), proto: 6, flags: ack}, "10.42.0.5:8080", true},
		{"v4 UDP", pkt{src: ap("192.168.1.2:40001"), dst: ap("192.168.1.10:30053"), proto: 17}, "10.42.0.5:5353", true},
		{"v4 UDP no checksum", pkt{src: ap("192.168.1.2:40002"), dst: ap("192.168.1.10:30053"), proto: 17, noCsum: true}, "10.42.0.5:5353", true},
		{"v6 TCP SYN", pkt{src: ap("[fd00::2]:40000"), dst: ap("[fd00::10]:30080"), proto: 6, flags: syn}, "[fd42::5]:8080", true},
		{"Local keeps no mark", pkt{src: ap("192.168.1.2:40003"), dst: ap("192.168.1.10:30081"), proto: 6, flags: syn}, "10.42.0.7:8080", false},
		{"not a frontend", pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:22"), proto: 6, flags: syn}, "", false},
		{"v4 fragment", pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30053"), proto: 17, frag: true}, "", false},
		{"SCTP", pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30080"), proto: 132}, "", false},
		{"v6 extension header", pkt{src: ap("[fd00::2]:40001"), dst: ap("[fd00::10]:30080"), proto: 6, flags: syn, hopByHop: true}, "", false},
	} {
		frame := tc.p.bytes()
		ret, got, mark := run(t, in, frame)
		if ret != tcxNext {
			t.Errorf("%s: ingress verdict %d, want next", tc.name, ret)
		}
		if tc.backend == "" {
			if !bytes.Equal(got, frame) || mark != 0 {
				t.Errorf("%s: ingress changed the packet (mark %#x)", tc.name, mark)
			}
			continue
		}
		pp := parseFrame(t, got)
		if pp.dst != ap(tc.backend) || pp.src != tc.p.src || !pp.csumOK {
			t.Errorf("%s: ingress made %+v, want to %s from %s with good checksums", tc.name, pp, tc.backend, tc.p.src)
		}
		if tc.p.noCsum && pp.l4Csum != 0 {
			t.Errorf("%s: UDP checksum %#x, want none still", tc.name, pp.l4Csum)
		}
		if (mark == cfg.MasqueradeMark) != tc.mark {
			t.Errorf("%s: mark %#x", tc.name, mark)
		}
		// The backend's reply, through egress.
		reply := pkt{src: ap(tc.backend), dst: tc.p.src, proto: tc.p.proto, flags: syn | ack, noCsum: tc.p.noCsum}
		ret, got, _ = run(t, out, reply.bytes())
		pp = parseFrame(t, got)
		if ret != tcxNext || pp.src != tc.p.dst || pp.dst != tc.p.src || !pp.csumOK {
			t.Errorf("%s: egress made %+v (verdict %d), want from %s to %s with good checksums", tc.name, pp, ret, tc.p.dst, tc.p.src)
		}
	}

	// Egress touches nothing without a reverse entry: a backend's
	// packet to another client port, the node's own traffic.
	for _, p := range []pkt{
		{src: ap("10.42.0.5:8080"), dst: ap("192.168.1.2:40009"), proto: 6, flags: ack},
		{src: ap("192.168.1.10:30080"), dst: ap("192.168.1.2:40000"), proto: 6, flags: ack},
		{src: ap("[fd42::5]:8080"), dst: ap("[fd00::2]:1"), proto: 17},
	} {
		frame := p.bytes()
		if ret, got, _ := run(t, out, frame); ret != tcxNext || !bytes.Equal(got, frame) {
			t.Errorf("egress of %v -> %v changed it (verdict %d)", p.src, p.dst, ret)
		}
	}

	// ClientIP affinity: new connections of a client stay on one
	// backend; without it they spread.
	for _, tc := range []struct {
		fe   string
		want int
	}{{"192.168.1.10:30082", 1}, {"192.168.1.10:30083", 4}} {
		seen := map[netip.AddrPort]bool{}
		for port := range uint16(64) {
			_, got, _ := run(t, in, pkt{src: netip.AddrPortFrom(ap("192.168.1.3:0").Addr(), 50000+port), dst: ap(tc.fe), proto: 6, flags: syn}.bytes())
			seen[parseFrame(t, got).dst] = true
		}
		if len(seen) != tc.want {
			t.Errorf("64 connections to %s went to %d backends, want %d", tc.fe, len(seen), tc.want)
		}
	}

	// The backends change: a UDP flow picks again, an established TCP
	// connection keeps its backend, a new one goes to the new backend.
	tab[services.Key{Addr: ap("192.168.1.10:0").Addr(), Port: 30053, Proto: services.UDP}].ExternalBackends = []services.Backend{{Addr: ap("10.42.0.6:5353")}}
	tab[services.Key{Addr: ap("192.168.1.10:0").Addr(), Port: 30080, Proto: services.TCP}].ExternalBackends = []services.Backend{{Addr: ap("10.42.0.6:8080")}}
	if err := makePlan(p.Next, tab, a).Apply(maps[mapFrontends], maps[mapBackends], "frontends"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    pkt
		want string
	}{
		{"UDP flow", pkt{src: ap("192.168.1.2:40001"), dst: ap("192.168.1.10:30053"), proto: 17}, "10.42.0.6:5353"},
		{"TCP established", pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30080"), proto: 6, flags: ack}, "10.42.0.5:8080"},
		{"TCP new", pkt{src: ap("192.168.1.2:40100"), dst: ap("192.168.1.10:30080"), proto: 6, flags: syn}, "10.42.0.6:8080"},
		{"TCP new, same ports as the established", pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30080"), proto: 6, flags: syn}, "10.42.0.6:8080"},
	} {
		_, got, _ := run(t, in, tc.p.bytes())
		if pp := parseFrame(t, got); pp.dst != ap(tc.want) || !pp.csumOK {
			t.Errorf("after the change, %s: went to %v, want %s", tc.name, pp.dst, tc.want)
		}
	}

	// A SYN sent again (its SYN-ACK lost, say) goes where the first
	// went, among four backends.
	for port := range uint16(16) {
		syn1 := pkt{src: netip.AddrPortFrom(ap("192.168.1.4:0").Addr(), 51000+port), dst: ap("192.168.1.10:30083"), proto: 6, flags: syn}
		_, first, _ := run(t, in, syn1.bytes())
		_, again, _ := run(t, in, syn1.bytes())
		if a, b := parseFrame(t, first).dst, parseFrame(t, again).dst; a != b {
			t.Fatalf("a SYN went to %s, the same SYN again to %s", a, b)
		}
	}

	// A frontend without backends drops new flows.
	if ret, _, _ := run(t, in, pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30099"), proto: 6, flags: syn}.bytes()); ret != tcxDrop {
		t.Errorf("SYN to a frontend without backends: verdict %d, want drop", ret)
	}
}

// FuzzUntouched runs both programs on arbitrary frames with empty maps:
// whatever a LAN sends, a packet that matches no frontend and no reverse
// entry comes out as it went in.
func FuzzUntouched(f *testing.F) {
	ap := netip.MustParseAddrPort
	f.Add(pkt{src: ap("192.168.1.2:40000"), dst: ap("192.168.1.10:30080"), proto: 6, flags: 2}.bytes())
	f.Add(pkt{src: ap("[fd00::2]:53"), dst: ap("[fd00::10]:30053"), proto: 17}.bytes())
	f.Add(pkt{src: ap("192.168.1.2:1"), dst: ap("192.168.1.10:2"), proto: 17, frag: true}.bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 1514 {
			return // BPF_PROG_TEST_RUN wants an Ethernet header, at most a frame
		}
		progs := untouchedProgs(t)
		for i, p := range progs {
			ret, got, mark, err := tryRun(p, frame)
			if errors.Is(err, unix.EINVAL) {
				return // a frame BPF_PROG_TEST_RUN refuses to build an skb of
			}
			if err != nil {
				t.Fatal(err)
			}
			if ret != tcxNext || !bytes.Equal(got, frame) || mark != 0 {
				t.Fatalf("%s: verdict %d, mark %#x, frame changed %v", directions[i].name, ret, mark, !bytes.Equal(got, frame))
			}
		}
	})
}

// untouchedProgs loads the programs against empty maps, once per
// process.
func untouchedProgs(t *testing.T) []*ebpf.Program {
	untouched.once.Do(func() {
		if err := Supported(); err != nil {
			untouched.err = err
			return
		}
		cfg := DefaultConfig()
		cfg.FlowEntries, cfg.AffinityEntries = 16, 16
		maps := map[string]*ebpf.Map{}
		for name, spec := range mapSpecs(&cfg) {
			m, err := ebpf.NewMap(spec)
			if err != nil {
				untouched.err = err
				return
			}
			maps[name] = m
		}
		for _, dir := range directions {
			p, err := load(dir, cfg.MasqueradeMark, maps)
			if err != nil {
				untouched.err = err
				return
			}
			untouched.progs = append(untouched.progs, p)
		}
		// The programs hold the maps.
		for _, m := range maps {
			m.Close()
		}
	})
	if untouched.err != nil {
		t.Skipf("programs not loaded: %v", untouched.err)
	}
	return untouched.progs
}

var untouched struct {
	once  sync.Once
	progs []*ebpf.Program
	err   error
}

// TestRewriteWhole runs the ingress program on new flows to a frontend
// whose entry Sync's plans rewrite meanwhile, over and over, while other
// frontends come and go (so that the kernel recycles the map's
// elements): every packet finds the frontend, and sees one version of
// its entry or the other, never a mix of the two. The races it looks
// for are rare: with entries replaced rather than rewritten in place (as
// before feVal.Lock), a reader on a machine of two CPUs saw a flow miss
// the frontend, or read another frontend's entry, within some 30000 to
// 160000 flows, so the test catches such a regression often, not
// always.
func TestRewriteWhole(t *testing.T) {
	needKernel(t)
	cfg := DefaultConfig()
	cfg.FlowEntries, cfg.AffinityEntries = 1024, 16
	maps := map[string]*ebpf.Map{}
	for name, spec := range mapSpecs(&cfg) {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		maps[name] = m
	}
	in, err := load(directions[0], cfg.MasqueradeMark, maps)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	ap := netip.MustParseAddrPort
	front := ap("192.168.1.10:30080")
	key := keyOf(services.Key{Addr: front.Addr(), Port: front.Port(), Proto: services.TCP})
	b0, b1 := ap("10.42.0.1:80"), ap("10.42.0.2:80")
	var slots bpfpin.Batch[slotKey, beVal]
	slots.Add(slotKey{1, 0}, beOf(services.Backend{Addr: b0}))
	slots.Add(slotKey{1, 1}, beOf(services.Backend{Addr: b1}))
	if err := bpfpin.Put(maps[mapBackends], slots); err != nil {
		t.Fatal(err)
	}
	// The first version sends every flow to slot 0 and has it
	// masqueraded; the second spreads flows over both slots and keeps
	// the client's address. A flow to slot 1 with the mark read a mix.
	versions := []feVal{{ID: 1, Count: 1}, {ID: 1, Count: 2, Flags: flagLocal}}
	write := func(p *plan) error {
		p.Locked = true
		return p.Apply(maps[mapFrontends], maps[mapBackends], "frontends")
	}
	first := &plan{}
	first.Fronts.Add(key, versions[0])
	if err := write(first); err != nil {
		t.Fatal(err)
	}

	readers, flows := 4, 50000
	if testing.Short() {
		flows = 5000
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	var werr error
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			other := key
			other.Addr[15] = byte(11 + i%8)
			p := &plan{}
			p.Fronts.Add(key, versions[i%2])
			p.Fronts.Add(other, feVal{ID: uint32(2 + i%8), Count: 0})
			if err := write(p); err != nil {
				werr = err
				return
			}
			if err := write(&plan{FrontDel: []feKey{other}}); err != nil {
				werr = err
				return
			}
		}
	})
	errs := make([]error, readers)
	var rg sync.WaitGroup
	for r := range readers {
		rg.Go(func() {
			client := netip.AddrFrom4([4]byte{192, 168, 2, byte(r)})
			for i := range flows {
				p := pkt{src: netip.AddrPortFrom(client, uint16(1024+i)), dst: front, proto: 6, flags: 0x02}
				ret, got, mark, err := tryRun(in, p.bytes())
				if err != nil {
					errs[r] = err
					return
				}
				pp := parseFrame(t, got)
				switch {
				case ret == tcxDrop:
					errs[r] = fmt.Errorf("flow %d: dropped: it read no backends, another frontend's entry", i)
				case ret != tcxNext || pp.dst == front:
					errs[r] = fmt.Errorf("flow %d: verdict %d, to %s: it missed the frontend", i, ret, pp.dst)
				case pp.dst != b0 && pp.dst != b1:
					errs[r] = fmt.Errorf("flow %d: to %s, not a backend", i, pp.dst)
				case pp.dst == b1 && mark != 0:
					errs[r] = fmt.Errorf("flow %d: to slot 1 with the mark: a mix of two versions", i)
				}
				if errs[r] != nil {
					return
				}
			}
		})
	}
	rg.Wait()
	close(done)
	wg.Wait()
	if werr != nil {
		t.Fatalf("write: %v", werr)
	}
	for r, err := range errs {
		if err != nil {
			t.Errorf("reader %d: %v", r, err)
		}
	}
}
