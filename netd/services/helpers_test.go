package services

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Builders of Services and EndpointSlices for the tests.

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type svcOpt func(*corev1.Service)

// svc is a ClusterIP Service default/name with the given clusterIPs and
// ports, made at epoch.
func svc(name string, clusterIPs []string, ports []corev1.ServicePort, opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(epoch)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: clusterIPs, Ports: ports},
	}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func ips(s ...string) []string { return s }

func tcp(name string, p int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: p, Protocol: corev1.ProtocolTCP}
}

func udp(name string, p int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: p, Protocol: corev1.ProtocolUDP}
}

func nodePort(p corev1.ServicePort, np int32) corev1.ServicePort { p.NodePort = np; return p }

func ports(p ...corev1.ServicePort) []corev1.ServicePort { return p }

func typ(t corev1.ServiceType) svcOpt { return func(s *corev1.Service) { s.Spec.Type = t } }

func eTPLocal(s *corev1.Service) {
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
}

func iTPLocal(s *corev1.Service) {
	p := corev1.ServiceInternalTrafficPolicyLocal
	s.Spec.InternalTrafficPolicy = &p
}

func externalIPs(a ...string) svcOpt { return func(s *corev1.Service) { s.Spec.ExternalIPs = a } }

func ingress(ing ...corev1.LoadBalancerIngress) svcOpt {
	return func(s *corev1.Service) { s.Status.LoadBalancer.Ingress = ing }
}

func trafficDistribution(v string) svcOpt {
	return func(s *corev1.Service) { s.Spec.TrafficDistribution = &v }
}

func annotate(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func ns(n string) svcOpt { return func(s *corev1.Service) { s.Namespace = n } }

func created(d time.Duration) svcOpt {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.NewTime(epoch.Add(d)) }
}

func affinity(timeout *int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if timeout != nil {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// slice is an EndpointSlice default/name of Service svcName.
func slice(svcName, name string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName},
		},
		AddressType: at,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func v4(svcName, name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return slice(svcName, name, discoveryv1.AddressTypeIPv4, ports, eps...)
}

func v6(svcName, name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return slice(svcName, name, discoveryv1.AddressTypeIPv6, ports, eps...)
}

func sport(name string, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Port: &p, Protocol: ptr(corev1.ProtocolTCP)}
}

func sportUDP(name string, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Port: &p, Protocol: ptr(corev1.ProtocolUDP)}
}

func sports(p ...discoveryv1.EndpointPort) []discoveryv1.EndpointPort { return p }

type epOpt func(*discoveryv1.Endpoint)

// ep is an endpoint on node "other", with nil (so ready, serving, not
// terminating) conditions.
func ep(addr string, opts ...epOpt) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr("other")}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func on(node string) epOpt { return func(e *discoveryv1.Endpoint) { e.NodeName = &node } }

// pod is a targetRef to the Pod of uid, as the EndpointSlice controller
// writes it.
func pod(uid string) epOpt {
	return func(e *discoveryv1.Endpoint) {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p-" + uid[:8], UID: types.UID(uid)}
	}
}

func ready(v bool) epOpt   { return func(e *discoveryv1.Endpoint) { e.Conditions.Ready = &v } }
func serving(v bool) epOpt { return func(e *discoveryv1.Endpoint) { e.Conditions.Serving = &v } }
func terminating(v bool) epOpt {
	return func(e *discoveryv1.Endpoint) { e.Conditions.Terminating = &v }
}

// term is a terminating endpoint still serving, as the EndpointSlice
// controller writes it.
func term(e *discoveryv1.Endpoint) {
	ready(false)(e)
	serving(true)(e)
	terminating(true)(e)
}

// down is a terminating endpoint no longer serving.
func down(e *discoveryv1.Endpoint) {
	ready(false)(e)
	serving(false)(e)
	terminating(true)(e)
}

func zones(z ...string) epOpt {
	return func(e *discoveryv1.Endpoint) {
		e.Hints = &discoveryv1.EndpointHints{}
		for _, n := range z {
			e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: n})
		}
	}
}

// render writes a table one line per frontend, sorted, as the tests'
// wants are written:
//
//	KEY KIND SERVICE:PORTNAME [BACKENDS] ext[BACKENDS] local aff=DURATION
//
// with ext only for NodePort and ExternalIP frontends, local when
// ExternalLocal, aff when Affinity, and a backend local to the node
// suffixed with "L".
func render(t Table) []string {
	var out []string
	for _, k := range slices.SortedFunc(maps.Keys(t), func(a, b Key) int { return strings.Compare(a.String(), b.String()) }) {
		f := t[k]
		line := fmt.Sprintf("%s %s %s:%s [%s]", k, f.Kind, f.Service, f.PortName, renderBackends(f.Backends))
		if f.Kind != ClusterIP {
			line += fmt.Sprintf(" ext[%s]", renderBackends(f.ExternalBackends))
		}
		if f.ExternalLocal {
			line += " local"
		}
		if f.Affinity != 0 {
			line += " aff=" + f.Affinity.String()
		}
		out = append(out, line)
	}
	return out
}

func renderBackends(bs []Backend) string {
	var s []string
	for _, b := range bs {
		if b.Local {
			s = append(s, b.Addr.String()+"L")
		} else {
			s = append(s, b.Addr.String())
		}
	}
	return strings.Join(s, " ")
}

func renderProblems(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// checkTable fails with a reason if t breaks an invariant every Build
// result keeps, under lim.
func checkTable(t Table, lim limits) error {
	var nb int
	for k, f := range t {
		if f == nil {
			return fmt.Errorf("%s: nil frontend", k)
		}
		if f.Key != k {
			return fmt.Errorf("%s: frontend has key %s", k, f.Key)
		}
		if !k.Addr.IsValid() || k.Addr.Is4In6() || k.Addr.Zone() != "" || !usable(k.Addr) || k.Port == 0 {
			return fmt.Errorf("%s: invalid key", k)
		}
		if k.Proto != TCP && k.Proto != UDP && k.Proto != SCTP {
			return fmt.Errorf("%s: invalid protocol", k)
		}
		switch f.Kind {
		case ClusterIP:
			if f.ExternalBackends != nil || f.ExternalLocal {
				return fmt.Errorf("%s: ClusterIP frontend with external backends", k)
			}
		case NodePort, ExternalIP:
		default:
			return fmt.Errorf("%s: kind %s", k, f.Kind)
		}
		if f.Affinity < 0 || f.Affinity > maxAffinitySeconds*time.Second {
			return fmt.Errorf("%s: affinity %s", k, f.Affinity)
		}
		for _, bs := range [][]Backend{f.Backends, f.ExternalBackends} {
			if len(bs) > lim.backends {
				return fmt.Errorf("%s: %d backends", k, len(bs))
			}
			nb += len(bs)
			for i, b := range bs {
				a := b.Addr.Addr()
				if !a.IsValid() || a.Is4In6() || a.Zone() != "" || !usable(a) || b.Addr.Port() == 0 {
					return fmt.Errorf("%s: invalid backend %s", k, b.Addr)
				}
				if a.Is4() != k.Addr.Is4() {
					return fmt.Errorf("%s: backend %s of the other family", k, b.Addr)
				}
				if i > 0 && bs[i-1].Addr.Compare(b.Addr) >= 0 {
					return fmt.Errorf("%s: backends not sorted or repeated: %s then %s", k, bs[i-1].Addr, b.Addr)
				}
			}
		}
	}
	if len(t) > lim.frontends {
		return fmt.Errorf("%d frontends", len(t))
	}
	if nb > lim.backendsTotal {
		return fmt.Errorf("%d backends in all", nb)
	}
	return nil
}
