package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/runtime"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/firmware/trust"
	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// FirmwareConfig has the agent take the over-the-air updates its rollouts
// offer it: it reads the offer on its Node and the trusted release keys
// from its view, verifies the release's signed manifest itself, fetches
// its components over the sync connection chunk by chunk, and hands them
// to Slots, which installs them; in the trial that follows a new agent it
// decides whether the node is healthy, and commits or reverts.
type FirmwareConfig struct {
	// Slots keeps what the node installed: firmware/updater's slots on a
	// real node, or a simulation's (bench) that installs nothing.
	// Required.
	Slots FirmwareSlots
	// Source fetches manifests and artifacts from the hub; nil fetches
	// them over the agent's sync connection, artifacts from the node's
	// site peers first when it shares images with them
	// (firmware_peers.go).
	Source FirmwareSource
	// Bandwidth caps downloads, in bytes/s: 0 for no cap, AutoBandwidth
	// for half of the throughput measured at the start of each transfer.
	Bandwidth int64
	// OS, Arch and Variant are the platform the node takes components
	// for: this binary's GOOS, GOARCH and GOARM when empty.
	OS, Arch, Variant string
	// Dir holds the downloads and the agent's own records of updates:
	// DataDir/firmware when empty.
	Dir string
	// Boot is what the start of this process found: a trial that ended
	// badly is reported to the hub as Reverted, with its reason.
	Boot *FirmwareOutcome
}

// AutoBandwidth has transfers capped at half the measured uplink.
const AutoBandwidth = -1

// FirmwareOutcome is how a trial ended, when the agent's start found one
// that had failed (it crashed, hung, or ran out of its window), and when.
type FirmwareOutcome struct {
	Release, Version string
	Reason, Message  string
	At               time.Time
}

// FirmwareSlots is what the agent needs of the node's installed versions.
type FirmwareSlots interface {
	// State returns the committed version, the highest committed, the
	// failed versions, and the trial in progress, if any.
	State() SlotState
	// Base returns the path of the committed artifact of a component, the
	// base a delta transfer is made against, if the node holds one.
	Base(component string) (string, bool)
	// Install installs the verified components of m, whose artifacts are
	// the files of paths by component name; restart reports that the
	// agent must restart into a new slot to go on with the trial.
	Install(ctx context.Context, release string, m *manifest.Manifest, paths map[string]string, window time.Duration, allowDowngrade bool) (restart bool, err error)
	// Commit ends the trial well; Revert ends it badly (restart: the
	// agent must restart into the committed slot).
	Commit(ctx context.Context) error
	Revert(ctx context.Context, reason, message string) (restart bool, err error)
	// RevertCommitted goes back from the committed version to the one
	// before, on the hub's order.
	RevertCommitted(ctx context.Context, reason string) (restart bool, err error)
}

// SlotState is the state of the node's installed versions.
type SlotState struct {
	Committed, Highest string
	Failed             []string
	// Previous is the version a RevertCommitted goes back to, if
	// CanRevert ("" for what the node was installed with).
	Previous  string
	CanRevert bool
	Trial     *SlotTrial
}

// SlotTrial is a version on trial: Agent if its agent is (the trial
// then runs in the new agent, after a restart), else only file
// components.
type SlotTrial struct {
	Release, Version string
	Deadline         time.Time
	Window           time.Duration
	Agent            bool
}

// FirmwareSource fetches a release from the hub.
type FirmwareSource interface {
	// Manifest returns the signed manifest envelope of release.
	Manifest(ctx context.Context, release string) ([]byte, error)
	// Fetch writes the artifact of c to dst, verifying every chunk,
	// against base (a path, "" for none) when the hub can send a delta,
	// at most rate bytes/s (0: no cap; AutoBandwidth), adding the bytes
	// it receives to received as they come.
	Fetch(ctx context.Context, release string, c manifest.Component, dst, base string, rate int64, received *atomic.Int64) (fwv1.TransferStats, error)
}

// Reasons the agent gives for a failed update, besides firmware/manifest's
// and the slots'.
const (
	ReasonNoTrust             = "NoTrust"
	ReasonFetch               = "FetchFailed"
	ReasonInstall             = "InstallFailed"
	ReasonHealthWindowExpired = "HealthWindowExpired"
	ReasonVersionMismatch     = "VersionMismatch"
	ReasonRevertOrdered       = "RevertOrdered"
	// ReasonHealthCheckFailed: the trial's window ended with one of the
	// release's health checks failing; the message names it.
	ReasonHealthCheckFailed = "HealthCheckFailed"
)

// FirmwareDir is the default FirmwareConfig.Dir under the data dir, which
// firmware/updater's slots share.
const FirmwareDir = "firmware"

// Files under FirmwareConfig.Dir.
const (
	firmwareReport    = "report.json"     // the last NodeFirmware reported
	firmwareTrialPods = "trial-pods.json" // the pods that ran when the agent left for a trial
	firmwareStaging   = "staging"         // downloads, named by sha256
	maxFirmwareFile   = 1 << 20
	// firmwareTrialChecks holds the health checks of the release on
	// trial (trialChecks).
	firmwareTrialChecks = "trial-checks.json"
)

// ErrRestart is returned by Run when the agent stopped to restart into
// another agent binary: a new version to try, or the committed one after
// a failed trial. The command that runs the agent then starts the binary
// firmware/updater's Boot names, in the same process.
var ErrRestart = errors.New("agent stopped to restart into another slot")

// firmware drives the node's updates; its fields are the loop's own,
// but for said, under mu.
type firmware struct {
	a    *Agent
	cfg  FirmwareConfig
	kick chan struct{}
	// refused remembers the offer the node refused or failed, so that it
	// is not tried again until the hub offers something else.
	refused fwv1.Offer
	// healthySince is when the version on trial was last seen healthy
	// after being unhealthy (zero: not healthy now).
	healthySince time.Time
	// checks are the health checks of the version on trial, nil until
	// the trial loads them.
	checks *checkState

	mu   sync.Mutex
	said *fwv1.NodeFirmware
}

func (a *Agent) buildFirmware() error {
	c := a.cfg.Firmware
	if c == nil {
		return nil
	}
	cfg := *c
	if cfg.Slots == nil {
		return errors.New("firmware: no slots")
	}
	if cfg.OS == "" && cfg.Arch == "" {
		cfg.OS, cfg.Arch, cfg.Variant = goruntime.GOOS, goruntime.GOARCH, goarm()
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(a.cfg.DataDir, FirmwareDir)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, firmwareStaging), 0o700); err != nil {
		return fmt.Errorf("firmware: %w", err)
	}
	if cfg.Source == nil {
		cfg.Source = a.sitePeersFirst(syncSource{a})
	}
	fw := &firmware{a: a, cfg: cfg, kick: make(chan struct{}, 1)}
	fw.said = fw.loadReport()
	a.fw = fw
	return nil
}

// Kick has the loop look again at the offer.
func (fw *firmware) Kick() {
	select {
	case fw.kick <- struct{}{}:
	default:
	}
}

// annotation returns the value of the node's firmware annotation, "" for
// none yet.
func (fw *firmware) annotation() string {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.said == nil {
		return ""
	}
	return fw.said.Encode()
}

// run works on offers until ctx ends or the agent must restart.
func (fw *firmware) run(ctx context.Context) {
	st := fw.cfg.Slots.State()
	// What the last start found, and what the slots hold now, come
	// before anything the loop does.
	fw.report(func(n *fwv1.NodeFirmware) {
		n.Version, n.FailedVersions = st.Committed, tail(st.Failed, 32)
		// A revert newer than what the node said last.
		if b := fw.cfg.Boot; b != nil && n.Since.Time.Before(b.At) {
			n.Release, n.Target, n.State, n.Reason, n.Message = b.Release, b.Version, fwv1.StateReverted, b.Reason, b.Message
			n.Since = metav1.NewTime(b.At)
		}
	})
	for {
		wait := fw.step(ctx)
		if ctx.Err() != nil {
			return
		}
		var (
			timer *time.Timer
			t     <-chan time.Time
		)
		if wait > 0 {
			timer = time.NewTimer(wait)
			t = timer.C
		}
		select {
		case <-ctx.Done():
		case <-fw.kick:
		case <-t:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// step does what the node's state and offer call for, and returns when
// to look again without being kicked (0: only when kicked).
func (fw *firmware) step(ctx context.Context) time.Duration {
	st := fw.cfg.Slots.State()
	if t := st.Trial; t != nil {
		return fw.trial(ctx, t)
	}
	offer := fw.offer()
	switch {
	case offer == nil:
		return 0
	case *offer == fw.refused:
		return 0
	case offer.Action == fwv1.OfferRevert:
		if st.Committed != offer.Version || !st.CanRevert {
			return 0
		}
		fw.a.log.Info("firmware: reverting on the hub's order", "version", offer.Version, "to", st.Previous)
		restart, err := fw.cfg.Slots.RevertCommitted(ctx, ReasonRevertOrdered)
		if err != nil {
			fw.fail(*offer, ReasonInstall, err)
			return 0
		}
		fw.report(func(n *fwv1.NodeFirmware) {
			n.Version, n.Release, n.Target = st.Previous, offer.Release, offer.Version
			n.State, n.Reason, n.Message = fwv1.StateReverted, ReasonRevertOrdered, "reverted on the rollout's order"
			n.FailedVersions = tail(appendNew(n.FailedVersions, offer.Version), 32)
		})
		if restart {
			fw.a.restart()
		}
		return 0
	case st.Committed == offer.Version:
		fw.report(func(n *fwv1.NodeFirmware) {
			if n.Target == offer.Version && n.State != fwv1.StateUpdated {
				n.State, n.Reason, n.Message, n.Since = fwv1.StateUpdated, "", "", fw.now()
			}
		})
		return 0
	case slices.Contains(st.Failed, offer.Version):
		fw.refused = *offer
		fw.report(func(n *fwv1.NodeFirmware) {
			if n.Target == offer.Version && (n.State == fwv1.StateFailed || n.State == fwv1.StateReverted) {
				return // the node said why already
			}
			n.Release, n.Target = offer.Release, offer.Version
			n.State, n.Reason, n.Message = fwv1.StateFailed, "AlreadyFailed", "version "+offer.Version+" failed on this node before"
		})
		return 0
	}
	return fw.install(ctx, st, *offer)
}

// fetchRetry is how long after a download that failed for want of the
// hub (not a refusal) the node tries again.
const fetchRetry = 30 * time.Second

// install verifies, fetches and installs the release of offer; it returns
// when to try again after a download that failed for want of the hub (0:
// do not).
func (fw *firmware) install(ctx context.Context, st SlotState, offer fwv1.Offer) time.Duration {
	log := fw.a.log.With("component", "firmware", "release", offer.Release, "version", offer.Version)
	fw.progress(offer, fwv1.StateOffered, nil)
	tr, err := fw.trust()
	if err != nil {
		// Not a refusal of the release: the node waits, Offered, for
		// keys it can check it with (a change of the trust set kicks
		// the loop).
		fw.a.log.Warn("firmware: no release keys to verify the offered release with", "release", offer.Release, "err", err)
		fw.report(func(n *fwv1.NodeFirmware) {
			n.Reason, n.Message = ReasonNoTrust, truncate(err.Error(), 1024)
		})
		return 0
	}
	env, err := fw.cfg.Source.Manifest(ctx, offer.Release)
	if err != nil {
		return fw.fetchFailed(ctx, offer, err)
	}
	m, err := manifest.Verify(env, tr, manifest.VerifyOptions{
		Now: fw.a.now(), OS: fw.cfg.OS, Arch: fw.cfg.Arch, Variant: fw.cfg.Variant, HighestCommitted: st.Highest,
	})
	if err != nil {
		fw.fail(offer, string(manifest.ReasonOf(err)), err)
		return 0
	}
	if m.Version != offer.Version {
		fw.fail(offer, ReasonVersionMismatch, fmt.Errorf("the hub offers version %s, the signed manifest says %s", offer.Version, m.Version))
		return 0
	}
	comps := m.ForPlatform(fw.cfg.OS, fw.cfg.Arch, fw.cfg.Variant)
	var total fwv1.TransferStats
	for _, c := range comps {
		total.Full += c.Size
	}
	fw.progress(offer, fwv1.StateDownloading, &fwv1.TransferStats{Full: total.Full})
	// The node reports its progress while it downloads, so that the hub
	// tells a slow download from a stuck one.
	var received atomic.Int64
	stopReports := fw.reportProgress(offer, &received, total.Full)
	defer stopReports()
	total.Full = 0
	paths := map[string]string{}
	for _, c := range comps {
		dst := filepath.Join(fw.cfg.Dir, firmwareStaging, c.SHA256)
		base, _ := fw.cfg.Slots.Base(c.Name)
		s, err := fw.cfg.Source.Fetch(ctx, offer.Release, c, dst, base, fw.cfg.Bandwidth, &received)
		total.Received += s.Received
		total.Full += s.Full
		total.Resumes += s.Resumes
		total.Delta = total.Delta || s.Delta
		total.FromPeers += s.FromPeers
		if err != nil {
			return fw.fetchFailed(ctx, offer, err)
		}
		paths[c.Name] = dst
	}
	stopReports()
	log.Info("firmware: release fetched and verified", "bytes", total.Received, "from_peers", total.FromPeers, "full_bytes", total.Full, "resumes", total.Resumes, "delta", total.Delta)
	fw.progress(offer, fwv1.StateInstalling, &total)
	if err := fw.saveTrialPods(ctx); err != nil {
		fw.fail(offer, ReasonInstall, err)
		return 0
	}
	if err := fw.saveTrialChecks(offer.Release, m); err != nil {
		fw.fail(offer, ReasonInstall, err)
		return 0
	}
	// Verify refused a downgrade the manifest's signed allowDowngradeFrom
	// does not cover: a lower version here is one it covers.
	allow := false
	if st.Highest != "" {
		c, err := manifest.CompareVersions(m.Version, st.Highest)
		allow = err == nil && c < 0
	}
	restart, err := fw.cfg.Slots.Install(ctx, offer.Release, m, paths, offer.HealthWindow.Duration, allow)
	for _, p := range paths {
		os.Remove(p)
	}
	if err != nil {
		if ctx.Err() == nil {
			fw.fail(offer, installReason(err), err)
		}
		return 0
	}
	fw.progress(offer, fwv1.StateTrial, &total)
	if restart {
		log.Info("firmware: restarting into the new agent for its trial")
		fw.a.restart()
	} else {
		fw.Kick() // the trial of file components runs here
	}
	return 0
}

// progressInterval is how often a node reports the bytes it downloaded.
const progressInterval = 5 * time.Second

// reportProgress reports the bytes received of a download of full bytes
// every progressInterval until the returned stop is called.
func (fw *firmware) reportProgress(offer fwv1.Offer, received *atomic.Int64, full int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := received.Load()
				fw.report(func(s *fwv1.NodeFirmware) {
					if s.Release == offer.Release && s.State == fwv1.StateDownloading {
						s.Transfer = &fwv1.TransferStats{Received: n, Full: full}
					}
				})
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() { close(done); wg.Wait() })
	}
}

// fetchFailed reports a download that failed. A refusal (the hub has no
// such release, a chunk did not match its digest) is final for this
// offer; anything else, such as the link going down, is tried again
// after fetchRetry.
func (fw *firmware) fetchFailed(ctx context.Context, offer fwv1.Offer, err error) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	var refused *transfer.RefusedError
	if manifest.ReasonOf(err) != "" || errors.As(err, &refused) && refused.Permanent() {
		fw.fail(offer, fetchReason(err), err)
		return 0
	}
	fw.a.log.Info("firmware: download failed; trying again", "release", offer.Release, "err", err, "retry_in", fetchRetry)
	fw.report(func(n *fwv1.NodeFirmware) {
		n.Release, n.Target, n.State, n.Reason, n.Message = offer.Release, offer.Version, fwv1.StateDownloading, ReasonFetch, truncate(err.Error(), 1024)
	})
	return fetchRetry
}

// settleFraction of a trial's window is how long the node must stay
// healthy before it commits (at most maxSettle): a new agent that fails a
// few seconds after its start is caught in its trial, not committed.
const (
	settleFraction = 3 // a third of the window
	maxSettle      = time.Minute
)

// trial checks the health of the version on trial: commit once the node
// has been healthy for the settle time, revert when its window ends
// first.
func (fw *firmware) trial(ctx context.Context, t *SlotTrial) time.Duration {
	offer := fw.offer()
	fw.report(func(n *fwv1.NodeFirmware) {
		if n.Target != t.Version || n.State != fwv1.StateTrial {
			n.Release, n.Target, n.State, n.Reason, n.Message, n.Since = t.Release, t.Version, fwv1.StateTrial, "", "", fw.now()
		}
	})
	healthy, reason, why := fw.healthy(ctx, t)
	ordered := offer != nil && offer.Action == fwv1.OfferRevert && offer.Version == t.Version
	if ordered {
		healthy, reason, why = false, ReasonRevertOrdered, "the rollout ordered a revert"
	}
	now := fw.a.now()
	switch {
	case !healthy:
		fw.healthySince = time.Time{}
	case fw.healthySince.IsZero():
		fw.healthySince = now
	}
	settle := min(t.Window/settleFraction, maxSettle)
	if healthy && now.Sub(fw.healthySince) >= settle {
		if err := fw.cfg.Slots.Commit(ctx); err != nil {
			fw.a.log.Error("firmware: commit", "version", t.Version, "err", err)
			return time.Second
		}
		fw.a.log.Info("firmware: new version healthy, committed", "version", t.Version, "healthy_for", now.Sub(fw.healthySince).Round(time.Millisecond))
		var msg string // the health checks skipped, if any
		if fw.checks != nil {
			msg = truncate(strings.Join(fw.checks.skipped, "; "), 1024)
		}
		os.Remove(filepath.Join(fw.cfg.Dir, firmwareTrialPods))
		fw.endChecks()
		fw.report(func(n *fwv1.NodeFirmware) {
			n.Version, n.State, n.Reason, n.Message, n.Since = t.Version, fwv1.StateUpdated, "", msg, fw.now()
		})
		return 0
	}
	if !ordered && now.Before(t.Deadline) {
		if healthy {
			return min(time.Second, settle-now.Sub(fw.healthySince))
		}
		return time.Second
	}
	if healthy {
		reason, why = ReasonHealthWindowExpired, "not healthy for "+settle.String()+" before the window ended"
	}
	fw.a.log.Warn("firmware: new version not healthy, reverting", "version", t.Version, "reason", reason, "why", why)
	restart, err := fw.cfg.Slots.Revert(ctx, reason, why)
	if err != nil {
		fw.a.log.Error("firmware: revert", "version", t.Version, "err", err)
		return time.Second
	}
	fw.endChecks()
	st := fw.cfg.Slots.State()
	fw.report(func(n *fwv1.NodeFirmware) {
		n.Version, n.State, n.Reason, n.Message, n.Since = st.Committed, fwv1.StateReverted, reason, why, fw.now()
		n.FailedVersions = tail(st.Failed, 32)
	})
	if restart {
		fw.a.restart()
	}
	return 0
}

// healthy reports whether the node is healthy on trial t: connected to
// the hub, every pod that ran when the agent left for the trial running
// again (unless the node no longer runs it), and every health check of
// the release passing; reason (HealthWindowExpired, or HealthCheckFailed
// for a check) and why say what is missing.
func (fw *firmware) healthy(ctx context.Context, t *SlotTrial) (ok bool, reason, why string) {
	if ok, why := fw.podsHealthy(ctx); !ok {
		return false, ReasonHealthWindowExpired, why
	}
	if ok, why := fw.checksPass(ctx, t); !ok {
		return false, ReasonHealthCheckFailed, why
	}
	return true, "", ""
}

// podsHealthy reports whether the node is connected to the hub and runs
// again every pod that ran when the agent left for the trial; why says
// what is missing.
func (fw *firmware) podsHealthy(ctx context.Context) (bool, string) {
	if !fw.a.Connected() {
		return false, "not connected to the hub"
	}
	want, err := fw.loadTrialPods()
	if err != nil {
		return false, err.Error()
	}
	if len(want) == 0 {
		return true, ""
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := fw.a.rt.List(lctx)
	if err != nil {
		return false, "list pods: " + err.Error()
	}
	running := map[string]bool{}
	for _, p := range list {
		running[p.Pod.UID] = allRunning(p)
	}
	for _, uid := range want {
		if !running[uid] && fw.a.desired(uid) {
			return false, "pod " + uid + " does not run again"
		}
	}
	return true, ""
}

func allRunning(p runtime.PodStatus) bool {
	if len(p.Containers) == 0 {
		return false
	}
	for _, c := range p.Containers {
		if c.State != runtime.StateRunning {
			return false
		}
	}
	return true
}

// saveTrialPods records the pods whose containers all run now, which the
// new agent must run again to be healthy.
func (fw *firmware) saveTrialPods(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := fw.a.rt.List(lctx)
	if err != nil {
		return fmt.Errorf("list pods before the update: %w", err)
	}
	var uids []string
	for _, p := range list {
		if allRunning(p) {
			uids = append(uids, p.Pod.UID)
		}
	}
	slices.Sort(uids)
	b, err := json.Marshal(uids)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(fw.cfg.Dir, firmwareTrialPods), b, 0o600)
}

func (fw *firmware) loadTrialPods() ([]string, error) {
	b, err := readLimited(filepath.Join(fw.cfg.Dir, firmwareTrialPods))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var uids []string
	if err := json.Unmarshal(b, &uids); err != nil {
		return nil, fmt.Errorf("pods of the trial: %w", err)
	}
	return uids, nil
}

// offer returns the offer on the node's Node, nil for none or one that
// does not decode.
func (fw *firmware) offer() *fwv1.Offer {
	o, ok, err := fw.a.cp.Get(wire.Key{Resource: wire.ResourceNodes, Name: fw.a.cfg.NodeName})
	if err != nil || !ok {
		return nil
	}
	var n corev1.Node
	if err := objects.Decode(o.Raw, o.Revision, &n); err != nil {
		return nil
	}
	s, ok := n.Annotations[fwv1.AnnotationOffer]
	if !ok {
		return nil
	}
	offer, err := fwv1.DecodeOffer(s)
	if err != nil {
		fw.a.log.Warn("firmware: the offer on the node's Node does not decode", "err", err)
		return nil
	}
	return offer
}

// trust returns the release keys of the node's view.
func (fw *firmware) trust() (manifest.Trust, error) {
	o, ok, err := fw.a.cp.Get(wire.FirmwareTrustKey)
	if err != nil {
		return manifest.Trust{}, err
	}
	if !ok {
		return manifest.Trust{}, errors.New("the node knows no release keys: add one on the hub with outpost release trust add")
	}
	var cm corev1.ConfigMap
	if err := objects.Decode(o.Raw, o.Revision, &cm); err != nil {
		return manifest.Trust{}, err
	}
	return trust.ParseTrust(cm.Data)
}

// fail reports that the update of offer failed, and leaves it until the
// hub offers something else.
func (fw *firmware) fail(offer fwv1.Offer, reason string, err error) {
	fw.refused = offer
	fw.a.log.Warn("firmware: update refused or failed; the node keeps its version", "release", offer.Release, "version", offer.Version, "reason", reason, "err", err)
	if fw.a.events != nil {
		fw.a.events.Node(corev1.EventTypeWarning, "FirmwareUpdateFailed", fmt.Sprintf("release %s (%s): %s: %v", offer.Release, offer.Version, reason, err))
	}
	msg := truncate(err.Error(), 1024)
	fw.report(func(n *fwv1.NodeFirmware) {
		n.Release, n.Target, n.State, n.Reason, n.Message, n.Since = offer.Release, offer.Version, fwv1.StateFailed, reason, msg, fw.now()
	})
}

func (fw *firmware) progress(offer fwv1.Offer, s fwv1.FirmwareState, t *fwv1.TransferStats) {
	fw.report(func(n *fwv1.NodeFirmware) {
		n.Release, n.Target, n.State, n.Reason, n.Message, n.Since = offer.Release, offer.Version, s, "", "", fw.now()
		if t != nil {
			n.Transfer = t
		}
	})
}

// report changes what the node says of its updates, keeps it on disk for
// the next start, and has the node report its status if it changed.
func (fw *firmware) report(change func(*fwv1.NodeFirmware)) {
	fw.mu.Lock()
	var n fwv1.NodeFirmware
	if fw.said != nil {
		n = *fw.said
		n.FailedVersions = slices.Clone(n.FailedVersions)
	}
	before := n.Encode()
	change(&n)
	after := n.Encode()
	if before != after || fw.said == nil {
		fw.said = &n
	}
	fw.mu.Unlock()
	if before == after {
		return
	}
	if err := atomicfile.WriteFile(filepath.Join(fw.cfg.Dir, firmwareReport), []byte(after), 0o600); err != nil {
		fw.a.log.Warn("firmware: keep the update state", "err", err)
	}
	if fw.a.status != nil {
		fw.a.status.NodeDue()
	}
}

func (fw *firmware) loadReport() *fwv1.NodeFirmware {
	b, err := readLimited(filepath.Join(fw.cfg.Dir, firmwareReport))
	if err != nil {
		return nil
	}
	n, err := fwv1.DecodeNodeFirmware(string(b))
	if err != nil {
		return nil
	}
	return n
}

func (fw *firmware) now() metav1.Time { return metav1.NewTime(fw.a.now()) }

// firmwareAnnotations adds the node's firmware annotation to out.
func (a *Agent) firmwareAnnotations(out map[string]string) map[string]string {
	if a.fw == nil {
		return out
	}
	v := a.fw.annotation()
	if v == "" {
		return out
	}
	out = maps.Clone(out)
	if out == nil {
		out = map[string]string{}
	}
	out[wire.AnnotationFirmware] = v
	return out
}

// desired reports whether the node's view still has the pod of uid.
func (a *Agent) desired(uid string) bool {
	objs, err := a.cp.List(wire.ResourcePods)
	if err != nil {
		return true
	}
	for _, o := range objs {
		var p corev1.Pod
		if objects.Decode(o.Raw, o.Revision, &p) == nil && string(p.UID) == uid {
			return true
		}
	}
	return false
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFirmwareFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFirmwareFile {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxFirmwareFile)
	}
	return b, nil
}

// goarm returns the GOARM this binary was built for, "" if not arm.
func goarm() string {
	if goruntime.GOARCH != "arm" {
		return ""
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GOARM" {
				return strings.TrimSuffix(strings.TrimSuffix(s.Value, ",softfloat"), ",hardfloat")
			}
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func tail(s []string, n int) []string {
	if len(s) > n {
		return slices.Clone(s[len(s)-n:])
	}
	return s
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// fetchReason is the reason a fetch failed: the manifest's refusal of a
// chunk or artifact (DigestMismatch), or FetchFailed.
func fetchReason(err error) string {
	if r := manifest.ReasonOf(err); r != "" {
		return string(r)
	}
	return ReasonFetch
}

// installReason is the reason an install failed: the slots' refusal
// (Downgrade, AlreadyFailed, DigestMismatch, ...) when they give one, or
// InstallFailed.
func installReason(err error) string {
	var r interface{ FirmwareReason() string }
	if errors.As(err, &r) {
		return r.FirmwareReason()
	}
	if r := manifest.ReasonOf(err); r != "" {
		return string(r)
	}
	return ReasonInstall
}
