// Package services is the node's service routing table: the pure core
// that turns Services and EndpointSlices, with what the node knows of its
// own pods, into frontends (a ClusterIP, NodePort or external IP with its
// port and protocol) and the backends each may reach. It does no I/O; the
// dataplanes (netd/ebpflb in the kernel, netd/nftlb as the nftables
// fallback) make the node route as a Table says.
package services

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// Proto is an IP protocol number a frontend listens on.
type Proto uint8

// The protocols Services use.
const (
	TCP  Proto = 6
	UDP  Proto = 17
	SCTP Proto = 132
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// Kind is what a frontend's address is.
type Kind uint8

// The kinds of frontends.
const (
	// ClusterIP is a Service's spec.clusterIP(s), reached from the
	// node's pods and host processes.
	ClusterIP Kind = iota + 1
	// NodePort is a node address with a Service's nodePort, reached from
	// the node itself and from outside it.
	NodePort
	// ExternalIP is one of a Service's spec.externalIPs (or a
	// load-balancer ingress IP), reached from the node and from outside.
	ExternalIP
)

func (k Kind) String() string {
	switch k {
	case ClusterIP:
		return "ClusterIP"
	case NodePort:
		return "NodePort"
	case ExternalIP:
		return "ExternalIP"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Key is what a connection's destination is matched on.
type Key struct {
	Addr  netip.Addr // IPv4 or IPv6, never a 4-in-6 mapped address
	Port  uint16
	Proto Proto
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Addr, k.Port), k.Proto)
}

// Backend is one endpoint a frontend may send a connection to.
type Backend struct {
	Addr netip.AddrPort
	// Local says the endpoint is a pod of this node.
	Local bool
}

// Frontend is one address, port and protocol a Service is reached on, and
// where connections to it go.
type Frontend struct {
	Key  Key
	Kind Kind
	// Service is "namespace/name" and PortName the Service port's name
	// (may be empty): for logs, DNS SRV records and the dataplanes'
	// comments.
	Service  string
	PortName string
	// Backends are where connections made on the node go (by its pods
	// and host processes), in a stable order. Empty means the Service has
	// no usable endpoint: connections are refused (TCP RST / ICMP port
	// unreachable), as kube-proxy does.
	Backends []Backend
	// ExternalBackends are where connections arriving from outside the
	// node go (NodePort and ExternalIP only; nil for ClusterIP). With
	// externalTrafficPolicy Local they are the node's own endpoints only,
	// and the client's address is kept (no masquerade).
	ExternalBackends []Backend
	// ExternalLocal says externalTrafficPolicy is Local.
	ExternalLocal bool
	// Affinity, if not zero, is the ClientIP session affinity timeout:
	// a client keeps its backend while it reconnects within it.
	Affinity time.Duration
}

// Table is every frontend the node routes, by Key.
type Table map[Key]*Frontend

// Dataplane makes the node route as a Table says. Implementations keep
// what they installed across agent restarts (pinned eBPF objects, nftables
// rules) and adopt it, so a Sync after a restart changes only what
// differs and connections in flight keep their backends.
type Dataplane interface {
	// Sync makes the node route exactly t: frontends not in t are
	// removed, changed ones updated in place. t is not modified nor kept.
	Sync(ctx context.Context, t Table) error
	// Close releases the dataplane's handles. The routing stays in place
	// (it outlives the agent); Remove takes it away.
	Close() error
}

// Limits every Table from Build holds to, which the dataplanes size their
// maps and rule sets by. Build leaves out what goes beyond them and says
// so in a Problem.
const (
	// MaxFrontends is the most frontends a node routes.
	MaxFrontends = 65536
	// MaxBackends is the most backends one frontend has, in each of
	// Backends and ExternalBackends.
	MaxBackends = 1024
	// MaxBackendsTotal is the most backends of all frontends together.
	MaxBackendsTotal = 262144
)
