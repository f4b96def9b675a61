package probes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// HookTarget is the container a lifecycle hook, or a check Once runs,
// runs for.
type HookTarget struct {
	// Exec runs exec hooks; nil if the runtime cannot, when they fail
	// with ErrExecNotSupported.
	Exec runtime.Execer
	Pod  runtime.PodRef
	// Container is the container's spec: its name names it in the
	// runtime, its ports resolve an httpGet's named port. Non-nil.
	Container *corev1.Container
	PodIP     string // the host of an httpGet without one
}

// RunHandler runs h, a container's postStart or preStop hook, and returns
// when it is done, or when ctx is: the caller bounds it (by the pod's
// grace period for preStop). As kubelet's handlers:
//   - exec runs the command in the container; it fails unless it exits
//     with 0;
//   - httpGet sends a GET as an httpGet probe does, with User-Agent
//     kube-lifecycle/<KubeVersion>, retrying in plain HTTP an HTTPS
//     request that got a plain HTTP answer; it fails only when no answer
//     came, whatever the status, as kubelet's hooks do;
//   - sleep waits the seconds given.
//
// The error says which hook failed and how, with the command's output or
// the HTTP error, in the words of kubelet's
// FailedPostStartHook and FailedPreStopHook events. A hook that cannot
// run as written wraps ErrInvalid; an exec hook on a runtime that cannot
// exec wraps ErrExecNotSupported; an httpGet without a host in a pod
// without an IP wraps ErrNoPodIP; one stopped by ctx wraps ctx's error.
func RunHandler(ctx context.Context, h *corev1.LifecycleHandler, t HookTarget) error {
	if t.Container == nil {
		return fmt.Errorf("%w lifecycle hook: no container given", ErrInvalid)
	}
	fail := func(name, format string, args ...any) error {
		return fmt.Errorf("%s for container %q in pod %s failed: "+format,
			append([]any{name, t.Container.Name, t.Pod}, args...)...)
	}
	if h == nil {
		return fail("lifecycle hook", "%w: no handler", ErrInvalid)
	}
	if err := checkLifecycleHandler(h, t.Container); err != nil {
		return fail("lifecycle hook", "%w: %s", ErrInvalid, err)
	}
	tg := target{pod: t.Pod, container: t.Container, podIP: t.PodIP}
	switch {
	case h.Exec != nil:
		name := fmt.Sprintf("exec lifecycle hook (%v)", h.Exec.Command)
		code, out, err := runExec(ctx, t.Exec, tg, h.Exec.Command)
		switch {
		case err != nil:
			return fail(name, "%w, message: %q", err, out)
		case code != 0:
			return fail(name, "command exited with code %d, message: %q", code, out)
		}
		return nil
	case h.HTTPGet != nil:
		name := fmt.Sprintf("HTTP lifecycle hook (%s)", h.HTTPGet.Path)
		if err := runHTTPHook(ctx, h.HTTPGet, tg); err != nil {
			return fail(name, "%w", err)
		}
		return nil
	default:
		name := fmt.Sprintf("sleep lifecycle hook (%d)", h.Sleep.Seconds)
		tm := time.NewTimer(time.Duration(min(h.Sleep.Seconds, int64(100*365*24*3600))) * time.Second)
		defer tm.Stop()
		select {
		case <-tm.C:
			return nil
		case <-ctx.Done():
			return fail(name, "container terminated before sleep hook finished: %w", ctx.Err())
		}
	}
}

func runHTTPHook(ctx context.Context, g *corev1.HTTPGetAction, t target) error {
	c := newHTTPClient("lifecycle")
	defer c.transport.CloseIdleConnections()
	req, err := c.request(ctx, g, t)
	if err != nil {
		return err
	}
	// No timeout but ctx's, as kubelet's.
	res, err := c.get(req, 0)
	if err != nil && isHTTPResponseError(err) {
		// Kubelet once sent every hook in plain HTTP; hooks written for
		// that still work.
		req = req.Clone(ctx)
		req.URL.Scheme = "http"
		req.Header.Del("Authorization")
		res, err = c.get(req, 0)
	}
	_ = res // kubelet's hooks succeed with any answer: a 404 runs the pod all the same
	return err
}
