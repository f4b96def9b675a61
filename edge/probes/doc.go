// Package probes runs a pod's startup, liveness and readiness probes and its
// postStart and preStop hooks, as kubelet's prober and lifecycle handlers do.
// The timing and thresholds of a container's probes are a pure state machine
// (Container); the Manager runs one worker per probe of every running
// container and reports Results; RunHandler runs one lifecycle hook.
//
// # The agent's side
//
// The agent calls Manager.Sync whenever it lists the runtime (a container
// started, restarted or exited; the pod is being deleted), Manager.Remove
// when the pod is gone, and re-plans when Config.OnChange names a pod. It
// reads Manager.Results for each container's Started and Ready, and kills a
// container whose Result says LivenessFailed (a failed liveness or startup
// probe), with KillGrace if set, else the pod's grace period, before
// restarting it by the pod's restart policy. The restarted container has
// another ID, which starts its probes afresh.
//
// Exec probes and exec hooks run through runtime.Execer; HTTP, TCP and gRPC
// ones connect from the agent's network namespace to the pod's IP, as
// kubelet's do. This package does not import edge/agent.
package probes
