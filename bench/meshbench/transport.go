package meshbench

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Sent is what a node sent, in bytes of memberlist's messages: what it
// hands the kernel, IP, UDP and TCP headers not counted.
type Sent struct {
	// Bytes is the sum of UDPBytes and StreamBytes.
	Bytes int64 `json:"bytes"`
	// UDPBytes and UDPPackets are the gossip, probes and acks sent as UDP
	// packets.
	UDPBytes   int64 `json:"udp_bytes"`
	UDPPackets int64 `json:"udp_packets"`
	// StreamBytes is what the node wrote on TCP streams, those it dialed
	// (push/pull, probes and messages over TCP) and those it accepted
	// (the replies to them). Streams counts the streams it dialed.
	StreamBytes int64 `json:"stream_bytes"`
	Streams     int64 `json:"streams"`
}

// sub returns s less an earlier reading.
func (s Sent) sub(earlier Sent) Sent {
	return Sent{
		Bytes:       s.Bytes - earlier.Bytes,
		UDPBytes:    s.UDPBytes - earlier.UDPBytes,
		UDPPackets:  s.UDPPackets - earlier.UDPPackets,
		StreamBytes: s.StreamBytes - earlier.StreamBytes,
		Streams:     s.Streams - earlier.Streams,
	}
}

// countingTransport is memberlist's own UDP and TCP transport counting
// what its node sends. All its methods are safe for concurrent use, as
// memberlist needs.
type countingTransport struct {
	*memberlist.NetTransport

	udpBytes, udpPackets, streamBytes, streams atomic.Int64

	// streamCh hands memberlist the streams NetTransport accepted, each
	// wrapped to count what memberlist writes on it; forward copies
	// them until done is closed.
	streamCh chan net.Conn
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

var _ memberlist.NodeAwareTransport = (*countingTransport)(nil)

// bindTries is how many times newCountingTransport picks a free port: the
// kernel picks one for TCP, which may be taken for UDP.
const bindTries = 10

// newCountingTransport listens on a free port of addr, over UDP and TCP,
// and starts copying the streams it accepts to StreamCh. The caller must
// Shutdown it unless memberlist does.
func newCountingTransport(addr netip.Addr) (*countingTransport, error) {
	var (
		nt  *memberlist.NetTransport
		err error
	)
	for range bindTries {
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{addr.String()},
			Logger:    log.New(io.Discard, "", 0), // NetTransport needs one
		})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %v: %w", addr, err)
	}
	t := &countingTransport{NetTransport: nt, streamCh: make(chan net.Conn), done: make(chan struct{})}
	t.wg.Add(1)
	go t.forward()
	return t, nil
}

// Bind returns the address and port the transport listens on.
func (t *countingTransport) Bind(addr netip.Addr) netip.AddrPort {
	return netip.AddrPortFrom(addr, uint16(t.GetAutoBindPort()))
}

// Sent returns what the node sent so far.
func (t *countingTransport) Sent() Sent {
	s := Sent{
		UDPBytes:    t.udpBytes.Load(),
		UDPPackets:  t.udpPackets.Load(),
		StreamBytes: t.streamBytes.Load(),
		Streams:     t.streams.Load(),
	}
	s.Bytes = s.UDPBytes + s.StreamBytes
	return s
}

// WriteTo sends a packet, counted.
func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.countPacket(b)
	return t.NetTransport.WriteTo(b, addr)
}

// WriteToAddress sends a packet, counted.
func (t *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.countPacket(b)
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *countingTransport) countPacket(b []byte) {
	t.udpBytes.Add(int64(len(b)))
	t.udpPackets.Add(1)
}

// DialTimeout dials a stream whose writes are counted.
func (t *countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.dialed(t.NetTransport.DialTimeout(addr, timeout))
}

// DialAddressTimeout dials a stream whose writes are counted.
func (t *countingTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.dialed(t.NetTransport.DialAddressTimeout(a, timeout))
}

func (t *countingTransport) dialed(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	t.streams.Add(1)
	return &countingConn{Conn: c, n: &t.streamBytes}, nil
}

// StreamCh returns the streams accepted, whose writes are counted.
func (t *countingTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// forward copies the streams NetTransport accepts to streamCh, wrapped,
// until done is closed; a stream it then holds is closed.
func (t *countingTransport) forward() {
	defer t.wg.Done()
	for {
		select {
		case c := <-t.NetTransport.StreamCh():
			select {
			case t.streamCh <- &countingConn{Conn: c, n: &t.streamBytes}:
			case <-t.done:
				c.Close()
				return
			}
		case <-t.done:
			return
		}
	}
}

// Shutdown closes the listeners, then stops copying streams; memberlist
// reads StreamCh until its transport has shut down, so that a stream
// accepted meanwhile is never stuck. It is safe to call twice.
func (t *countingTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		err = t.NetTransport.Shutdown()
		close(t.done)
		t.wg.Wait()
	})
	return err
}

// countingConn is a stream adding what is written on it to n.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}
