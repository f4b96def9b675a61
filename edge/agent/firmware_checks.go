package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/probes"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// A release's health checks (manifest.HealthCheck) in its trial.
//
// install records the verified manifest's checks in firmwareTrialChecks
// before the slots install the release, so that the agent on trial,
// started anew in another binary, runs the checks that were signed. A
// trial with no record of its own version (lost, or never written by
// whatever installed the release) fetches the release's manifest from the
// hub and verifies it again, at most every checkInterval. (An agent that
// predates health checks cannot install a release that has some at all:
// its strict decoder refuses the manifest's unknown field.)
//
// During the trial, once the node is connected and runs its pods again,
// every check runs, all at once, each within its timeout, at most every
// checkInterval; in between, the last results stand. A check runs against
// every pod of the node it selects (by name, or by its controller's
// name); all of them must pass. A check that selects no pod of the node is
// skipped, and said so in the node's status when it commits: a rollout's
// selector may well cover nodes that do not run the workload. A pod it
// selects that does not run fails it.

// checkInterval is how often the trial's health checks run, at most.
const checkInterval = 2 * time.Second

// maxCheckMessage bounds what of a failed check's output (a command's,
// an HTTP answer's) goes into the reason it failed.
const maxCheckMessage = 256

// trialChecks is the record firmwareTrialChecks holds: the checks of a
// release on trial.
type trialChecks struct {
	Release string                 `json:"release"`
	Version string                 `json:"version"`
	Checks  []manifest.HealthCheck `json:"checks"`
}

// decodeTrialChecks decodes the record of a trial's checks, at most
// maxFirmwareFile bytes, strictly: unknown fields and trailing data are
// refused, and the checks must be valid, as a manifest's.
func decodeTrialChecks(b []byte) (*trialChecks, error) {
	if len(b) > maxFirmwareFile {
		return nil, fmt.Errorf("checks of the trial: %d bytes, over %d", len(b), maxFirmwareFile)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tc trialChecks
	if err := dec.Decode(&tc); err != nil {
		return nil, fmt.Errorf("checks of the trial: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("checks of the trial: data after the record")
	}
	if tc.Version == "" {
		return nil, errors.New("checks of the trial: no version")
	}
	if err := manifest.ValidateHealthChecks(tc.Checks); err != nil {
		return nil, fmt.Errorf("checks of the trial: %w", err)
	}
	return &tc, nil
}

// saveTrialChecks records the checks of m, the verified manifest of
// release, for its trial; a release without checks records none, so that
// the trial does not look for them elsewhere.
func (fw *firmware) saveTrialChecks(release string, m *manifest.Manifest) error {
	b, err := json.Marshal(trialChecks{Release: release, Version: m.Version, Checks: m.HealthChecks})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(fw.cfg.Dir, firmwareTrialChecks), b, 0o600); err != nil {
		return fmt.Errorf("keep the release's health checks: %w", err)
	}
	return nil
}

// loadTrialChecks returns the checks of the version on trial t: those
// install recorded, or, without a record of t's version, those of t's
// manifest fetched from the hub and verified again.
func (fw *firmware) loadTrialChecks(ctx context.Context, t *SlotTrial) ([]manifest.HealthCheck, error) {
	b, err := readLimited(filepath.Join(fw.cfg.Dir, firmwareTrialChecks))
	if err == nil {
		tc, err := decodeTrialChecks(b)
		if err == nil && tc.Release == t.Release && tc.Version == t.Version {
			return tc.Checks, nil
		}
		if err != nil {
			fw.a.log.Warn("firmware: the record of the trial's health checks is damaged; reading them from the release", "err", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	tr, err := fw.trust()
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	env, err := fw.cfg.Source.Manifest(mctx, t.Release)
	if err != nil {
		return nil, fmt.Errorf("fetch the manifest of release %s: %w", t.Release, err)
	}
	// No downgrade check: the slots took this version already.
	m, err := manifest.Verify(env, tr, manifest.VerifyOptions{Now: fw.a.now(), OS: fw.cfg.OS, Arch: fw.cfg.Arch, Variant: fw.cfg.Variant})
	if err != nil {
		return nil, err
	}
	if m.Version != t.Version {
		return nil, fmt.Errorf("release %s is version %s, the trial's is %s", t.Release, m.Version, t.Version)
	}
	if err := fw.saveTrialChecks(t.Release, m); err != nil {
		fw.a.log.Warn("firmware: keep the trial's health checks", "err", err)
	}
	return m.HealthChecks, nil
}

// checkState is what the trial knows of its health checks; the firmware
// loop's own.
type checkState struct {
	version string // of the trial they are for
	loadErr string // why the checks could not be had, "" once they were
	checks  []manifest.HealthCheck
	ran     time.Time // zero until they ran
	failed  string    // why the first failing check failed, "" if none did
	skipped []string  // the checks that selected no pod, with why
}

// endChecks forgets the trial's checks once it ended.
func (fw *firmware) endChecks() {
	fw.checks = nil
	os.Remove(filepath.Join(fw.cfg.Dir, firmwareTrialChecks))
}

// checksPass runs the health checks of trial t, at most every
// checkInterval, and reports whether they all passed; why says which
// failed and how.
func (fw *firmware) checksPass(ctx context.Context, t *SlotTrial) (bool, string) {
	cs := fw.checks
	now := fw.a.now()
	if cs == nil || cs.version != t.Version || cs.loadErr != "" && (now.Sub(cs.ran) >= checkInterval || now.Before(cs.ran)) {
		checks, err := fw.loadTrialChecks(ctx, t)
		if err != nil {
			fw.checks = &checkState{version: t.Version, loadErr: "health checks: " + err.Error(), ran: now}
			return false, fw.checks.loadErr
		}
		cs = &checkState{version: t.Version, checks: checks}
		fw.checks = cs
	}
	if cs.loadErr != "" {
		return false, cs.loadErr
	}
	if len(cs.checks) == 0 {
		return true, ""
	}
	if cs.ran.IsZero() || now.Sub(cs.ran) >= checkInterval || now.Before(cs.ran) {
		before := cs.failed
		cs.failed, cs.skipped = fw.runChecks(ctx, cs.checks)
		cs.ran = fw.a.now()
		if cs.failed != "" && cs.failed != before { // once per failure, not at every run
			fw.a.log.Info("firmware: a health check of the trial failed", "version", t.Version, "why", cs.failed)
		}
	}
	return cs.failed == "", cs.failed
}

// runChecks runs checks against the node's pods, all at once, and returns
// why the first one (in the manifest's order) failed, "" if none did,
// and which were skipped for want of a pod.
func (fw *firmware) runChecks(ctx context.Context, checks []manifest.HealthCheck) (failed string, skipped []string) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := fw.a.rt.List(lctx)
	cancel()
	if err != nil {
		return "health checks: list pods: " + err.Error(), nil
	}
	pods, err := fw.nodePods()
	if err != nil {
		return "health checks: read the node's pods: " + err.Error(), nil
	}
	running := make(map[string]runtime.PodStatus, len(list))
	for _, p := range list {
		running[p.Pod.UID] = p
	}
	exec, _ := fw.a.rt.(runtime.Execer)
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i := range checks {
		h := &checks[i]
		targets := selectPods(pods, h)
		if len(targets) == 0 {
			skipped = append(skipped, fmt.Sprintf("health check %s skipped: the node runs no pod %s/%s", h.Name, h.Namespace, h.Pod))
			continue
		}
		wg.Go(func() {
			var all []error
			for _, p := range targets {
				st, ok := running[string(p.UID)]
				if err := runCheck(ctx, h, p, st, ok, exec); err != nil {
					all = append(all, err)
				}
			}
			errs[i] = errors.Join(all...)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return truncate("health check "+checks[i].Name+": "+strings.ReplaceAll(err.Error(), "\n", "; "), 1024), skipped
		}
	}
	return "", skipped
}

// nodePods returns the pods bound to the node: those of its view and its
// static pods. The caller owns them.
func (fw *firmware) nodePods() ([]*corev1.Pod, error) {
	objs, err := fw.a.cp.List(wire.ResourcePods)
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, o := range objs {
		var p corev1.Pod
		if objects.Decode(o.Raw, o.Revision, &p) == nil && p.Spec.NodeName == fw.a.cfg.NodeName && p.UID != "" {
			out = append(out, &p)
		}
	}
	ms, _ := readManifests(filepath.Join(fw.a.cfg.DataDir, ManifestsDir), fw.a.cfg.NodeName)
	for _, m := range ms {
		if m.err == nil {
			out = append(out, m.pod)
		}
	}
	return out, nil
}

// selectPods returns the pods of pods that h selects: of its namespace,
// named h.Pod or controlled by an owner named h.Pod, and not being
// deleted.
func selectPods(pods []*corev1.Pod, h *manifest.HealthCheck) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Namespace != h.Namespace || p.DeletionTimestamp != nil {
			continue
		}
		if p.Name == h.Pod {
			out = append(out, p)
			continue
		}
		if c := metav1.GetControllerOf(p); c != nil && c.Name == h.Pod {
			out = append(out, p)
		}
	}
	return out
}

// runCheck runs h once against pod p, whose status in the runtime is st
// (ok: the runtime holds it), within h's timeout, as a probe of the pod
// would run: edge/probes judges it.
func runCheck(ctx context.Context, h *manifest.HealthCheck, p *corev1.Pod, st runtime.PodStatus, ok bool, exec runtime.Execer) error {
	name := p.Namespace + "/" + p.Name
	if !ok {
		return fmt.Errorf("pod %s does not run", name)
	}
	if len(p.Spec.Containers) == 0 {
		return fmt.Errorf("pod %s has no containers", name)
	}
	c := &p.Spec.Containers[0]
	var handler corev1.ProbeHandler
	what := "pod " + name
	if h.HTTP != nil {
		handler.HTTPGet = &corev1.HTTPGetAction{Port: intstr.FromInt(h.HTTP.Port), Path: h.HTTP.Path, Scheme: corev1.URISchemeHTTP}
	} else {
		handler.Exec = &corev1.ExecAction{Command: h.Exec}
		if h.Container != "" {
			if c = podContainer(p, h.Container); c == nil {
				return fmt.Errorf("pod %s has no container %s", name, h.Container)
			}
		}
		if cs := st.Container(c.Name); cs == nil || cs.State != runtime.StateRunning {
			return fmt.Errorf("container %s of pod %s does not run", c.Name, name)
		}
		what = "container " + c.Name + " of pod " + name
	}
	host := st.IP
	if p.Spec.HostNetwork {
		host = "127.0.0.1"
	}
	t := probes.HookTarget{Exec: exec, Pod: runtime.PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}, Container: c, PodIP: host}
	if o := probes.Once(ctx, &handler, t, h.Timeout()); o.Outcome != probes.Success {
		msg := strings.TrimSpace(o.Message)
		if msg == "" {
			msg = strings.ToLower(o.Outcome.String())
		}
		return fmt.Errorf("%s: %s", what, truncate(msg, maxCheckMessage))
	}
	return nil
}

// podContainer returns p's container of that name, nil if it has none.
func podContainer(p *corev1.Pod, name string) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}
