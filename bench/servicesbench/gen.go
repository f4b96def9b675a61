package servicesbench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/netd/services"
)

// The generated cluster: Service i is svc-<i> in namespace ns-<i%100>,
// a ClusterIP Service of one TCP port 80 (http) at clusterIP(i), with one
// EndpointSlice of 4 ready endpoints backend(i, 0..3) on port 8080.
const (
	nodeName    = "bench-node"
	domain      = "cluster.local"
	servicePort = 80
	backendPort = 8080
	backends    = 4
	namespaces  = 100
)

var (
	serviceBase = netip.MustParseAddr("10.96.0.0")  // service CIDR 10.96.0.0/16
	backendBase = netip.MustParseAddr("10.244.0.0") // cluster CIDR 10.244.0.0/16
	serviceCIDR = netip.MustParsePrefix("10.96.0.0/16")
	clusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	created     = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
)

// addrAt returns base plus off.
func addrAt(base netip.Addr, off uint32) netip.Addr {
	b := base.As4()
	v := binary.BigEndian.Uint32(b[:]) + off
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// clusterIP returns Service i's ClusterIP: 10.96.0.1 on.
func clusterIP(i int) netip.Addr { return addrAt(serviceBase, uint32(i)+1) }

// backend returns the address of Service i's endpoint j: 10.244.0.1 on,
// Service 0's are 10.244.0.1 to .4.
func backend(i, j int) netip.Addr { return addrAt(backendBase, uint32(i*backends+j)+1) }

// serviceName returns Service i's namespace and name.
func serviceName(i int) (ns, name string) {
	return fmt.Sprintf("ns-%d", i%namespaces), fmt.Sprintf("svc-%d", i)
}

// dnsName returns Service i's cluster name.
func dnsName(i int) string {
	ns, name := serviceName(i)
	return name + "." + ns + ".svc." + domain + "."
}

// Generate returns n Services and their EndpointSlices, as above. gen
// varies the endpoints of Service n-1: their port is 8080+gen, so that
// two generations differ in one Service's backends.
func Generate(n, gen int) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*corev1.Service, 0, n)
	eps := make([]*discoveryv1.EndpointSlice, 0, n)
	ready, other := true, "other-node"
	proto := corev1.ProtocolTCP
	for i := range n {
		ns, name := serviceName(i)
		ip := clusterIP(i).String()
		svcs = append(svcs, &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("u-" + name), CreationTimestamp: created},
			Spec: corev1.ServiceSpec{
				Type:       corev1.ServiceTypeClusterIP,
				ClusterIP:  ip,
				ClusterIPs: []string{ip},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				Ports: []corev1.ServicePort{{
					Name: "http", Protocol: proto, Port: servicePort, TargetPort: intstr.FromInt32(backendPort),
				}},
				Selector: map[string]string{"app": name},
			},
		})
		port := int32(backendPort)
		if i == n-1 {
			port += int32(gen)
		}
		s := &discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abcde", CreationTimestamp: created,
				Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: &proto, Port: &port}},
		}
		for j := range backends {
			node := nodeName
			if j > 0 {
				node = other
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{backend(i, j).String()},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				NodeName:   &node,
			})
		}
		eps = append(eps, s)
	}
	return svcs, eps
}

func ptr[T any](v T) *T { return &v }

// compact returns what routing and DNS read of svcs and eps.
func compact(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice) ([]*services.Service, []*services.Slice) {
	return services.FromServices(svcs), services.FromSlices(eps)
}

// buildTable returns the routing table of svcs and eps on the bench node,
// or an error if Build left something out.
func buildTable(svcs []*services.Service, eps []*services.Slice) (services.Table, error) {
	t, probs := services.Build(services.Input{Node: nodeName, Services: svcs, Slices: eps})
	if len(probs) > 0 {
		return nil, fmt.Errorf("build the table: %d problems, the first %s", len(probs), probs[0])
	}
	if len(t) != len(svcs) {
		return nil, fmt.Errorf("build the table: %d frontends of %d Services", len(t), len(svcs))
	}
	return t, nil
}

// Kinds of the records of an objects file.
const (
	kindService       = 1
	kindEndpointSlice = 2
)

// maxObject bounds one record of an objects file; maxObjects their
// number.
const (
	maxObject  = 1 << 20
	maxObjects = 2*maxServices + 2
)

// writeObjects writes svcs and eps in their Kubernetes protobuf encoding
// (as the agent's checkpoint holds them) to w, a record each: a kind byte,
// a 4-byte big-endian length and the encoding.
func writeObjects(w io.Writer, svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice) error {
	put := func(kind byte, raw []byte) error {
		var h [5]byte
		h[0] = kind
		binary.BigEndian.PutUint32(h[1:], uint32(len(raw)))
		if _, err := w.Write(h[:]); err != nil {
			return err
		}
		_, err := w.Write(raw)
		return err
	}
	for _, s := range svcs {
		raw, err := objects.Encode(s)
		if err == nil {
			err = put(kindService, raw)
		}
		if err != nil {
			return err
		}
	}
	for _, s := range eps {
		raw, err := objects.Encode(s)
		if err == nil {
			err = put(kindEndpointSlice, raw)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errObjects is wrapped by readObjects for a malformed file.
var errObjects = errors.New("malformed objects file")

// readObjects reads what writeObjects wrote: the encoded Services and
// EndpointSlices, not decoded. Records are at most maxObject bytes and
// maxObjects in number.
func readObjects(r io.Reader) (svcs, eps [][]byte, err error) {
	for n := 0; ; n++ {
		var h [5]byte
		if _, err := io.ReadFull(r, h[:]); err == io.EOF {
			return svcs, eps, nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("%w: record %d: %w", errObjects, n, err)
		}
		if n >= maxObjects {
			return nil, nil, fmt.Errorf("%w: more than %d records", errObjects, maxObjects)
		}
		size := binary.BigEndian.Uint32(h[1:])
		if size > maxObject {
			return nil, nil, fmt.Errorf("%w: record %d of %d bytes", errObjects, n, size)
		}
		raw := make([]byte, size)
		if _, err := io.ReadFull(r, raw); err != nil {
			return nil, nil, fmt.Errorf("%w: record %d: %w", errObjects, n, err)
		}
		switch h[0] {
		case kindService:
			svcs = append(svcs, raw)
		case kindEndpointSlice:
			eps = append(eps, raw)
		default:
			return nil, nil, fmt.Errorf("%w: record %d of kind %d", errObjects, n, h[0])
		}
	}
}

// decodeObjects decodes what readObjects returned and keeps what routing
// and DNS read of it, as the agent's proxy does with its view.
func decodeObjects(svcRaw, epsRaw [][]byte) ([]*services.Service, []*services.Slice, error) {
	svcs := make([]*services.Service, 0, len(svcRaw))
	for _, raw := range svcRaw {
		var s corev1.Service
		if err := objects.Decode(raw, 1, &s); err != nil {
			return nil, nil, err
		}
		svcs = append(svcs, services.FromService(&s))
	}
	eps := make([]*services.Slice, 0, len(epsRaw))
	for _, raw := range epsRaw {
		var s discoveryv1.EndpointSlice
		if err := objects.Decode(raw, 1, &s); err != nil {
			return nil, nil, err
		}
		eps = append(eps, services.FromSlice(&s))
	}
	return svcs, eps, nil
}
