package pods

import corev1 "k8s.io/api/core/v1"

// Probed is what the probes of a pod's containers found, as the caller's
// prober (edge/probes) last said: Plan restarts a container its liveness
// probe failed, and Status reports readiness and startup from it. A nil
// *Probed means no prober runs on this node, and a running container is
// started and ready as soon as it runs.
type Probed struct {
	// Results are by container name, each for one instance of it.
	Results map[string]ProbeResult
}

// ProbeResult is what one container instance's probes found.
type ProbeResult struct {
	ID        string // the instance the results are for, as runtime.ContainerStatus.ID
	Started   bool   // its startup probe succeeded, or it has none
	Ready     bool   // its readiness probe succeeded, or it has none and Started
	Unhealthy bool   // its liveness or startup probe failed past its threshold
	Message   string // why it is unhealthy, for the Killing event
}

// result returns the result of container c's running instance id, and
// whether there is one.
func (p *Probed) result(name, id string) (ProbeResult, bool) {
	if p == nil {
		return ProbeResult{}, false
	}
	r, ok := p.Results[name]
	return r, ok && r.ID == id
}

// probedState returns whether the running instance id of container c is
// started and ready, as probed says: with no prober, a running container
// is both; with one, a container with a startup (readiness) probe is
// started (ready) only once the probe said so for this very instance.
func probedState(probed *Probed, c *corev1.Container, id string) (started, ready bool) {
	if probed == nil {
		return true, true
	}
	r, ok := probed.result(c.Name, id)
	started = c.StartupProbe == nil || ok && r.Started
	ready = started && (c.ReadinessProbe == nil || ok && r.Ready)
	return started, ready
}
