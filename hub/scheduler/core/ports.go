package core

import corev1 "k8s.io/api/core/v1"

const bindAllHostIP = "0.0.0.0"

// hostPort is a host port a container asks for, with its defaults
// filled in: 0.0.0.0 for no address, TCP for no protocol.
type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

type protoPort struct {
	protocol corev1.Protocol
	port     int32
}

// hostPorts are the host ports in use on a node: address -> (protocol,
// port) -> how many pods hold it.
type hostPorts map[string]map[protoPort]int

// hostPortsOf returns the host ports pod holds: those of its containers
// and of its sidecars (init containers with restartPolicy Always), which
// run as long as the pod does.
func hostPortsOf(pod *corev1.Pod) []hostPort {
	var out []hostPort
	collect := func(ports []corev1.ContainerPort) {
		for _, p := range ports {
			if p.HostPort <= 0 {
				continue
			}
			hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: p.HostPort}
			if hp.ip == "" {
				hp.ip = bindAllHostIP
			}
			if hp.protocol == "" {
				hp.protocol = corev1.ProtocolTCP
			}
			out = append(out, hp)
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			collect(c.Ports)
		}
	}
	for i := range pod.Spec.Containers {
		collect(pod.Spec.Containers[i].Ports)
	}
	return out
}

func (h *hostPorts) add(p hostPort) {
	if *h == nil {
		*h = hostPorts{}
	}
	m := (*h)[p.ip]
	if m == nil {
		m = map[protoPort]int{}
		(*h)[p.ip] = m
	}
	m[protoPort{p.protocol, p.port}]++
}

func (h hostPorts) remove(p hostPort) {
	m := h[p.ip]
	pp := protoPort{p.protocol, p.port}
	if m[pp] <= 1 {
		delete(m, pp)
		if len(m) == 0 {
			delete(h, p.ip)
		}
		return
	}
	m[pp]--
}

// conflicts reports whether p clashes with a port in use: a wildcard
// address clashes with the same protocol and port on any address, a
// specific one with the same address or the wildcard.
func (h hostPorts) conflicts(p hostPort) bool {
	pp := protoPort{p.protocol, p.port}
	if p.ip == bindAllHostIP {
		for _, m := range h {
			if m[pp] > 0 {
				return true
			}
		}
		return false
	}
	return h[bindAllHostIP][pp] > 0 || h[p.ip][pp] > 0
}
