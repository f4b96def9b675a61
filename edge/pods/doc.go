// Package pods is the pure decision core of the edge agent's pod lifecycle:
// Plan turns desired pods, what the runtime holds and per-pod records into
// actions, and Status words the outcome as kubelet would; MergeHub,
// NeedsResend and Resync keep the status in step with the hub's copy, as
// kubelet's status manager does with the API's. No I/O, no clock.
//
// # The pod workers' loop
//
// edge/podworker keeps a Record per pod UID, persisted so that a restart keeps
// back-offs and restart counts, and runs, whenever desired changes, an
// action completes, a container exits, or NextWake comes:
//
//	actual, _ := rt.List(ctx)
//	d := pods.Plan(desired, actual, records, now)
//	for _, pd := range d.Pods {
//		// If the pod's worker is still busy with earlier actions, skip pd
//		// whole (actions and record). Else persist pd.Record (delete it if
//		// pd.Forget) and hand pd.Actions to the worker, which runs them in
//		// order, after each: rec = pods.Observe(rec, a, err, now); persist.
//	}
//	// After the actions ran, from a fresh List, for each desired pod:
//	//	st := pods.Status(podWithItsLatestStatus, actualOfPod, rec, now)
//	// goes to the status outbox (and becomes the pod's latest status).
//
// desired holds what the hub (or a static manifest) wants on this node,
// deleted pods included until the hub removes them; losing the hub is not a
// deletion. ConfirmTerminated is the cue to push the pod's final Status and
// then tell the hub it may remove the object. Errors in building a
// container's config (a missing configMap key) are wrapped with
// ErrContainerConfig and given to Observe like runtime errors.
//
// Behavior follows kubelet: init containers one at a time, then sidecars
// and app containers; restarts by restart policy with a back-off of 10s
// doubling to 5 minutes, reset after 10 minutes of running; image pull
// back-off; phases, conditions and container statuses worded as kubelet
// words them. Probes are run by the caller (edge/probes), whose results
// Plan and Status take as a *Probed: a liveness failure restarts the
// container, and readiness and startup are reported from them.
package pods
