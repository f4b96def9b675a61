package meshbench

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/outpost-mesh/outpost/edge/relay"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// SyncResult is what the relayed sync measure found: the same objects
// delivered to a node's sync client straight from the hub's sync server,
// and through a site peer's relay (edge/relay), on loopback.
type SyncResult struct {
	// Bytes is the object bytes delivered in each run, in Objects pods,
	// as the hub's store holds them; the sync stream compresses them
	// with zstd (the pods' bulk is random hex: to a little over half).
	Bytes   int64 `json:"bytes"`
	Objects int   `json:"objects"`
	// Direct and Relayed are the times of the runs, from the hub's index
	// taking the pods until the client's store holds them all.
	Direct  Times `json:"direct"`
	Relayed Times `json:"relayed"`
	// DirectMBps and RelayedMBps are Bytes over the median times, in MB
	// (10^6 bytes) a second; Ratio is RelayedMBps over DirectMBps.
	DirectMBps  float64 `json:"direct_mb_per_s"`
	RelayedMBps float64 `json:"relayed_mb_per_s"`
	Ratio       float64 `json:"ratio"`
	// RelayUp and RelayDown are the bytes the relay forwarded toward the
	// hub and back, over all runs (QUIC's packets, headers and acks
	// included); RelayDropped the datagrams it dropped.
	RelayUp      int64 `json:"relay_up_bytes"`
	RelayDown    int64 `json:"relay_down_bytes"`
	RelayDropped int64 `json:"relay_dropped"`
}

// syncNode is the node name the client syncs as.
const syncNode = "bench-node"

// measureSync delivers cfg.SyncBytes of pods to a sync client cfg.SyncRuns
// times straight from an in-process sync server (sync/server over a view
// index fed by hand, what the hub runs over its store) and as many through
// an edge/relay Relay with its default configuration, taking turns, each
// run with a fresh client and relay. The relayed client reaches the relay
// as the agent's does: its direct dial fails, and it fails over to the
// relay it is offered (sync/client's Config.Relays).
func measureSync(ctx context.Context, cfg Config, logf func(string, ...any)) (*SyncResult, error) {
	h, err := startSyncHub(ctx)
	if err != nil {
		return nil, err
	}
	defer h.close()

	n := max(1, int(cfg.SyncBytes/int64(cfg.SyncObjectBytes)))
	res := &SyncResult{Objects: n}
	var direct, relayed []time.Duration
	for r := range cfg.SyncRuns {
		for _, viaRelay := range []bool{false, true} {
			d, size, st, err := h.deliver(ctx, cfg, fmt.Sprintf("r%d-%t", r, viaRelay), n, viaRelay)
			if err != nil {
				return nil, fmt.Errorf("sync run %d (relayed %t): %w", r+1, viaRelay, err)
			}
			res.Bytes = size
			route := "direct"
			if viaRelay {
				route = "relayed"
				relayed = append(relayed, d)
				res.RelayUp, res.RelayDown, res.RelayDropped = res.RelayUp+st.Up, res.RelayDown+st.Down, res.RelayDropped+st.Dropped
			} else {
				direct = append(direct, d)
			}
			logf("  %s: %d pods (%s) in %s, %.1f MB/s", route, n, fmtMB(res.Bytes), d.Round(time.Millisecond), mbps(res.Bytes, d))
		}
	}
	res.Direct, res.Relayed = summarize(direct), summarize(relayed)
	res.DirectMBps, res.RelayedMBps = mbps(res.Bytes, res.Direct.Median), mbps(res.Bytes, res.Relayed.Median)
	if res.DirectMBps > 0 {
		res.Ratio = res.RelayedMBps / res.DirectMBps
	}
	return res, nil
}

func mbps(b int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(b) / 1e6 / d.Seconds()
}

func fmtMB(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

// syncHub is a sync server on 127.0.0.1 over a view index the benchmark
// feeds, with the node's certificates.
type syncHub struct {
	pki   *benchPKI
	x     *view.Index
	objs  *hubObjects
	addr  netip.AddrPort
	rev   int64
	done  chan error // Serve's end
	close func()     // stops the server and waits for it
}

func startSyncHub(ctx context.Context) (*syncHub, error) {
	pki, err := newBenchPKI(syncNode)
	if err != nil {
		return nil, err
	}
	x := view.NewIndex(view.DefaultConfig())
	if err := x.Reset(0, nil); err != nil {
		return nil, err
	}
	h := &syncHub{pki: pki, x: x, objs: &hubObjects{latest: map[wire.Key][]byte{}}}
	scfg := server.DefaultConfig()
	scfg.Certificate, scfg.ClientCAs = pki.serving, pki.pool
	scfg.Views, scfg.Objects, scfg.Authority, scfg.Sink = x, h.objs, refuseJoins{}, discardStatus{}
	scfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(scfg)
	if err != nil {
		return nil, err
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("hub listen: %w", err)
	}
	h.addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := h.apply(view.Event{Key: wire.Key{Resource: wire.ResourceNodes, Name: syncNode}, Raw: mustEncode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: syncNode}})}); err != nil {
		pc.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	h.done = make(chan error, 1)
	go func() { h.done <- srv.Serve(sctx, pc) }()
	h.close = func() {
		cancel()
		<-h.done
		pc.Close()
	}
	return h, nil
}

// apply hands the index one event at the next revision.
func (h *syncHub) apply(ev view.Event) error {
	h.rev++
	ev.Revision = h.rev
	if err := h.x.Apply([]view.Event{ev}); err != nil {
		return fmt.Errorf("index %s: %w", ev.Key, err)
	}
	h.objs.put(ev.Key, ev.Raw)
	return nil
}

// deliver starts a client (through a fresh relay if viaRelay), waits for
// its session, then binds n pods of cfg.SyncObjectBytes to its node and
// times them until its store holds them; then deletes them and waits for
// that too, untimed.
func (h *syncHub) deliver(ctx context.Context, cfg Config, tag string, n int, viaRelay bool) (took time.Duration, size int64, st relay.PeerStats, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	var wg sync.WaitGroup
	defer wg.Wait() // the client and the relay, once canceled below
	defer cancel()

	store := newCountingStore()
	ccfg := client.DefaultConfig()
	ccfg.HubAddr = h.addr.String()
	ccfg.NodeName = syncNode
	ccfg.AgentVersion = "meshbench"
	ccfg.Certificate = func() (*tls.Certificate, error) { return &h.pki.node, nil }
	ccfg.RootCAs = h.pki.pool
	ccfg.Store, ccfg.Outbox = store, store
	ccfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ccfg.MinBackoff, ccfg.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	var rl *relay.Relay
	if viaRelay {
		rcfg := relay.DefaultConfig()
		rcfg.Bind = netip.MustParseAddrPort("127.0.0.1:0")
		rcfg.Target = func() (netip.AddrPort, error) { return h.addr, nil }
		rcfg.Allowed = func(ip netip.Addr) bool { return ip.IsLoopback() }
		if rl, err = relay.Listen(rcfg); err != nil {
			return 0, 0, st, err
		}
		wg.Go(func() { _ = rl.Run(ctx) })
		// The node's own uplink is down: the direct dial fails at once,
		// and the client fails over to the relay it is offered.
		ccfg.Dial = func(context.Context) (net.PacketConn, net.Addr, error) { return nil, nil, errUplinkDown }
		ccfg.Relays = func() (netip.Addr, []netip.AddrPort) {
			return netip.MustParseAddr("127.0.0.1"), []netip.AddrPort{rl.Addr()}
		}
	}
	c, err := client.New(ccfg)
	if err != nil {
		return 0, 0, st, err
	}
	wg.Go(func() { _ = c.Run(ctx) })
	if err := pollUntil(ctx, "the client's session", func() bool { return c.Connected() && c.Relayed() == viaRelay }); err != nil {
		return 0, 0, st, err
	}

	pods := make([]wire.Key, n)
	for i := range pods {
		pods[i] = wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: fmt.Sprintf("pod-%s-%d", tag, i)}
	}
	raws := make([][]byte, n)
	for i, k := range pods {
		raws[i] = benchPod(k.Name, cfg.SyncObjectBytes)
		size += int64(len(raws[i]))
	}
	start := time.Now()
	for i, k := range pods {
		if err := h.apply(view.Event{Key: k, Raw: raws[i]}); err != nil {
			return 0, 0, st, err
		}
	}
	want := h.rev
	if err := pollUntil(ctx, "the pods to reach the client", func() bool { return store.LastRevision() >= want }); err != nil {
		return 0, 0, st, err
	}
	took = time.Since(start)
	for _, k := range pods {
		if err := h.apply(view.Event{Key: k, Deleted: true}); err != nil {
			return 0, 0, st, err
		}
	}
	want = h.rev
	if err := pollUntil(ctx, "the pods' deletion to reach the client", func() bool { return store.LastRevision() >= want }); err != nil {
		return 0, 0, st, err
	}
	if rl != nil {
		st = rl.Stats().Peers[netip.MustParseAddr("127.0.0.1")]
	}
	return took, size, st, nil
}

// errUplinkDown is what the relayed client's direct dial fails with.
var errUplinkDown = errors.New("uplink down (benchmark)")

// pollUntil polls cond every millisecond until it holds, or fails when
// ctx ends.
func pollUntil(ctx context.Context, what string, cond func() bool) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// hubObjects is the server's Objects: the latest bytes of every key.
type hubObjects struct {
	mu     sync.Mutex
	latest map[wire.Key][]byte
}

func (o *hubObjects) put(k wire.Key, raw []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if raw == nil {
		delete(o.latest, k)
		return
	}
	o.latest[k] = raw
}

func (o *hubObjects) Object(_ context.Context, k wire.Key, rev int64) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	raw, ok := o.latest[k]
	if !ok {
		return nil, fmt.Errorf("%s at %d: %w", k, rev, server.ErrObjectGone)
	}
	return raw, nil
}

// refuseJoins is the server's Authority: the node has its certificate
// already, and nothing joins or renews.
type refuseJoins struct{}

func (refuseJoins) Join(context.Context, netip.Addr, *wire.JoinRequest) ([]byte, []byte, error) {
	return nil, nil, &wire.Error{Code: wire.CodeForbidden, Message: "no joins in this benchmark"}
}

func (refuseJoins) Renew(context.Context, string, []byte) ([]byte, error) {
	return nil, &wire.Error{Code: wire.CodeForbidden, Message: "no renewals in this benchmark"}
}

// discardStatus is the server's Sink: the client sends no status.
type discardStatus struct{}

func (discardStatus) ApplyStatus(context.Context, string, wire.StatusItem) error { return nil }

// countingStore is the client's Store and Outbox: it keeps each key's
// revision, not its bytes, and sends nothing.
type countingStore struct {
	mu   sync.Mutex
	rev  int64
	held map[wire.Key]int64
}

func newCountingStore() *countingStore { return &countingStore{held: map[wire.Key]int64{}} }

func (s *countingStore) LastRevision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

func (s *countingStore) Inventory() ([]wire.InventoryEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := make([]wire.InventoryEntry, 0, len(s.held))
	for k, r := range s.held {
		inv = append(inv, wire.InventoryEntry{Key: k, Revision: r})
	}
	return inv, nil
}

func (s *countingStore) ApplyBatch(changes []wire.Change, rev int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range changes {
		if c.Op == wire.OpDelete {
			delete(s.held, c.Key)
		} else {
			s.held[c.Key] = c.Revision
		}
	}
	s.rev = max(s.rev, rev)
	return nil
}

func (s *countingStore) Rewind() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev = 0
	return nil
}

func (s *countingStore) Pending(int) ([]wire.StatusItem, error) { return nil, nil }
func (s *countingStore) Ack(...uint64) error                    { return nil }

var (
	_ client.Store  = (*countingStore)(nil)
	_ client.Outbox = (*countingStore)(nil)
)

// podCodec encodes pods as the hub's store holds them: Kubernetes
// protobuf.
var podCodec = func() runtime.Encoder {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	return protobuf.NewSerializer(s, s)
}()

// mustEncode encodes a Pod or a Node, which cannot fail.
func mustEncode(obj runtime.Object) []byte {
	switch o := obj.(type) {
	case *corev1.Pod:
		o.APIVersion, o.Kind = "v1", "Pod"
	case *corev1.Node:
		o.APIVersion, o.Kind = "v1", "Node"
	}
	var b bytes.Buffer
	utilruntime.Must(podCodec.Encode(obj, &b))
	return b.Bytes()
}

// benchPod returns a pod bound to the node, of about size bytes encoded:
// an annotation of random hex makes up the bulk, which zstd on the sync
// stream can shrink only to about half.
func benchPod(name string, size int) []byte {
	pad := make([]byte, max(0, size-300)/2)
	_, _ = rand.Read(pad)
	return mustEncode(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{"bench/pad": hex.EncodeToString(pad)}},
		Spec:       corev1.PodSpec{NodeName: syncNode, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	})
}

// benchPKI is a throwaway hub CA, the hub's serving certificate for
// 127.0.0.1 and one node's client certificate.
type benchPKI struct {
	pool    *x509.CertPool
	serving tls.Certificate
	node    tls.Certificate
}

func newBenchPKI(node string) (*benchPKI, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshbench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	leaf := func(serial int64, tmpl *x509.Certificate) (tls.Certificate, error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, key)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("certificate of %s: %w", tmpl.Subject.CommonName, err)
		}
		l, err := x509.ParseCertificate(der)
		if err != nil {
			return tls.Certificate{}, err
		}
		return tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: k, Leaf: l}, nil
	}
	p := &benchPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	if p.serving, err = leaf(2, &x509.Certificate{
		Subject: pkix.Name{CommonName: "outpost-hub"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}); err != nil {
		return nil, err
	}
	if p.node, err = leaf(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: wire.NodeUserPrefix + node, Organization: []string{wire.NodesGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	return p, nil
}
