package wire

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// UsageVersion is the first capability version that carries Usage: an
// edge sends it only on a session of that version or later, so an older
// hub never gets a frame type it does not know.
const UsageVersion = 4

// Limits of a Usage a hub accepts: a node runs a few hundred pods at most,
// and relays for the peers of its site, a few dozen at most.
const (
	MaxUsagePods       = 2000
	MaxUsageContainers = 100 // per pod
	MaxUsageRelayPeers = 256
)

// ResourceUsage is what one node, pod or container uses: CPU as a rate in
// nanocores (billionths of a core) over the report's window, memory as
// the working set in bytes at the report's time (usage less inactive
// file cache, as kubelet counts it).
type ResourceUsage struct {
	CPU    uint64
	Memory uint64
}

// ContainerUsage is the usage of one container of a pod.
type ContainerUsage struct {
	Name string
	ResourceUsage
}

// PodUsage is the usage of a pod's containers.
type PodUsage struct {
	Namespace, Name string
	Containers      []ContainerUsage
}

// RelayUsage counts what a node's relay (edge/relay) forwarded to the hub
// for one site peer whose uplink is down, since the relay started: bytes
// toward the hub (Up) and back (Down), and datagrams dropped (Dropped), of
// which Capped for the peer's cap on relayed bytes. Peer is the peer's
// mesh IP, 4 or 16 bytes on the wire.
type RelayUsage struct {
	Peer                      netip.Addr
	Up, Down, Dropped, Capped uint64
}

// Usage reports a node's resource usage, since capability version 4
// (UsageVersion), on a stream the edge opens and writes Usage frames to
// until its session ends; the hub answers nothing. Each replaces the
// node's previous one: the edge sends only its latest, never a backlog.
// Time is when it was measured (whole milliseconds on the wire), Window
// the span the CPU rates were taken over.
//
// Unchanged says that the usage is still, near enough, that of the
// node's previous report on the stream, which the hub keeps as of Time;
// it carries no usage. An idle node so refreshes its report in a few
// bytes. The first report of a stream is never Unchanged.
//
// Relay holds the counters of the node's relay, one entry per site peer
// it relayed for, at most MaxUsageRelayPeers, each peer once; an
// Unchanged report carries none, and the hub keeps those of the previous
// report. A build that predates the field skips it, so it needs no new
// capability version.
type Usage struct {
	Time      time.Time
	Window    time.Duration
	Node      ResourceUsage
	Pods      []PodUsage
	Unchanged bool
	Relay     []RelayUsage
}

func (m *Usage) Type() Type { return TypeUsage }

func (m *Usage) appendTo(e *enc) {
	if !m.Time.IsZero() {
		e.uint(1, uint64(max(m.Time.UnixMilli(), 0)))
	}
	e.uint(2, uint64(max(m.Window, 0)/time.Millisecond))
	if m.Node != (ResourceUsage{}) {
		e.message(3, func(e *enc) { encodeResourceUsage(e, 1, m.Node) })
	}
	for _, p := range m.Pods {
		e.message(4, func(e *enc) {
			e.string(1, p.Namespace)
			e.string(2, p.Name)
			for _, c := range p.Containers {
				e.message(3, func(e *enc) {
					e.string(1, c.Name)
					encodeResourceUsage(e, 2, c.ResourceUsage)
				})
			}
		})
	}
	e.bool(5, m.Unchanged)
	for _, r := range m.Relay {
		e.message(6, func(e *enc) {
			e.bytes(1, r.Peer.AsSlice())
			e.uint(2, r.Up)
			e.uint(3, r.Down)
			e.uint(4, r.Dropped)
			e.uint(5, r.Capped)
		})
	}
}

// encodeResourceUsage writes u's CPU and memory as fields first and
// first+1.
func encodeResourceUsage(e *enc, first int, u ResourceUsage) {
	e.uint(protowire.Number(first), u.CPU)
	e.uint(protowire.Number(first+1), u.Memory)
}

func (m *Usage) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			var ms uint64
			if ms, err = f.varint(); err == nil {
				if ms > 1<<53 {
					return fmt.Errorf("%w: usage time %d out of range", ErrMalformed, ms)
				}
				m.Time = time.UnixMilli(int64(ms))
			}
		case 2:
			m.Window, err = f.millis()
		case 3:
			var body []byte
			if body, err = f.sub(); err == nil {
				err = eachField(body, func(f field) (err error) {
					return decodeResourceUsage(f, 1, &m.Node)
				})
			}
		case 4:
			if len(m.Pods) >= MaxUsagePods {
				return fmt.Errorf("%w: usage of more than %d pods", ErrMalformed, MaxUsagePods)
			}
			var body []byte
			if body, err = f.sub(); err != nil {
				return err
			}
			var p PodUsage
			if err = decodePodUsage(body, &p); err == nil {
				m.Pods = append(m.Pods, p)
			}
		case 5:
			m.Unchanged, err = f.boolean()
		case 6:
			if len(m.Relay) >= MaxUsageRelayPeers {
				return fmt.Errorf("%w: relay usage of more than %d peers", ErrMalformed, MaxUsageRelayPeers)
			}
			var body []byte
			if body, err = f.sub(); err != nil {
				return err
			}
			var r RelayUsage
			if err = decodeRelayUsage(body, &r); err != nil {
				return err
			}
			if slices.ContainsFunc(m.Relay, func(q RelayUsage) bool { return q.Peer == r.Peer }) {
				return fmt.Errorf("%w: relay usage of peer %v twice", ErrMalformed, r.Peer)
			}
			m.Relay = append(m.Relay, r)
		}
		return err
	})
}

// decodeRelayUsage reads one peer's relay counters; the peer's address
// must be 4 or 16 bytes.
func decodeRelayUsage(b []byte, r *RelayUsage) error {
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			var ip []byte
			if ip, err = f.bytes(); err != nil {
				return err
			}
			var ok bool
			if r.Peer, ok = netip.AddrFromSlice(ip); !ok {
				return fmt.Errorf("%w: relay peer address of %d bytes", ErrMalformed, len(ip))
			}
		case 2:
			r.Up, err = f.varint()
		case 3:
			r.Down, err = f.varint()
		case 4:
			r.Dropped, err = f.varint()
		case 5:
			r.Capped, err = f.varint()
		}
		return err
	})
	if err == nil && !r.Peer.IsValid() {
		err = fmt.Errorf("%w: relay usage without a peer address", ErrMalformed)
	}
	return err
}

func decodePodUsage(b []byte, p *PodUsage) error {
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			p.Namespace, err = f.str()
		case 2:
			p.Name, err = f.str()
		case 3:
			if len(p.Containers) >= MaxUsageContainers {
				return fmt.Errorf("%w: usage of more than %d containers in a pod", ErrMalformed, MaxUsageContainers)
			}
			var body []byte
			if body, err = f.sub(); err != nil {
				return err
			}
			var c ContainerUsage
			err = eachField(body, func(f field) (err error) {
				if f.num == 1 {
					c.Name, err = f.str()
					return err
				}
				return decodeResourceUsage(f, 2, &c.ResourceUsage)
			})
			if err == nil && c.Name == "" {
				err = fmt.Errorf("%w: container usage without a name", ErrMalformed)
			}
			p.Containers = append(p.Containers, c)
		}
		return err
	})
	if err == nil && (p.Namespace == "" || p.Name == "") {
		err = fmt.Errorf("%w: pod usage without a namespace and name", ErrMalformed)
	}
	return err
}

// decodeResourceUsage reads f into u when it is field first (CPU) or
// first+1 (memory), and skips it otherwise.
func decodeResourceUsage(f field, first int, u *ResourceUsage) (err error) {
	switch int(f.num) {
	case first:
		u.CPU, err = f.varint()
	case first + 1:
		u.Memory, err = f.varint()
	}
	return err
}
