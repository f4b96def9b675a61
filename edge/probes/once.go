package probes

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Once runs h once against the container t names, within timeout, as a
// probe of the container would run and judge it: an exec passes when the
// command exits with 0, an httpGet with a status from 200 to 399 (a
// redirect to another host is not followed), a tcpSocket when it
// connects, a grpc when the health service answers SERVING. It is for
// checks that are not the container's own probes, such as the health
// checks of an over-the-air release. An Errored outcome says the check
// could not be run at all.
func Once(ctx context.Context, h *corev1.ProbeHandler, t HookTarget, timeout time.Duration) Observation {
	if h == nil || t.Container == nil {
		return Observation{Errored, "no handler or no container given"}
	}
	pr := newProber(t.Exec)
	defer pr.http.transport.CloseIdleConnections()
	return pr.probe(ctx, &corev1.Probe{ProbeHandler: *h}, timeout, target{pod: t.Pod, container: t.Container, podIP: t.PodIP})
}
