package agent_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// fakeSlots is a unit test's stand-in for firmware/updater's slots: it
// keeps its state in memory and installs nothing.
type fakeSlots struct {
	mu        sync.Mutex
	st        agent.SlotState
	installed map[string][]byte // the artifacts Install was given, by component
	commits   int
	// reason and message are those of the last Revert.
	reason, message string
}

func (s *fakeSlots) State() agent.SlotState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if st.Trial != nil {
		t := *st.Trial
		st.Trial = &t
	}
	return st
}

func (s *fakeSlots) Base(string) (string, bool) { return "", false }

func (s *fakeSlots) Install(_ context.Context, release string, m *manifest.Manifest, paths map[string]string, window time.Duration, _ bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.installed = map[string][]byte{}
	for name, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return false, err
		}
		s.installed[name] = b
	}
	s.st.Trial = &agent.SlotTrial{Release: release, Version: m.Version, Deadline: time.Now().Add(window), Window: window, Agent: true}
	return true, nil
}

func (s *fakeSlots) Commit(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Previous, s.st.CanRevert, s.st.Committed, s.st.Highest = s.st.Committed, true, s.st.Trial.Version, s.st.Trial.Version
	s.st.Trial = nil
	s.commits++
	return nil
}

func (s *fakeSlots) Revert(_ context.Context, reason, message string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reason, s.message = reason, message
	s.st.Failed = append(s.st.Failed, s.st.Trial.Version)
	s.st.Trial = nil
	return true, nil
}

func (s *fakeSlots) RevertCommitted(context.Context, string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Failed = append(s.st.Failed, s.st.Committed)
	s.st.Committed, s.st.Previous, s.st.CanRevert = s.st.Previous, "", false
	return true, nil
}

// memSource is a unit test's stand-in for the hub's artifact streams:
// releases and artifacts in memory.
type memSource struct {
	envelopes map[string][]byte
	blobs     map[string][]byte // by sha256
}

func (m *memSource) Manifest(_ context.Context, release string) ([]byte, error) {
	env, ok := m.envelopes[release]
	if !ok {
		return nil, fmt.Errorf("release %s not found", release)
	}
	return env, nil
}

func (m *memSource) Fetch(_ context.Context, _ string, c manifest.Component, dst, _ string, _ int64, received *atomic.Int64) (fwv1.TransferStats, error) {
	b := m.blobs[c.SHA256]
	received.Add(int64(len(b)))
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		return fwv1.TransferStats{}, err
	}
	if err := c.VerifyFile(dst); err != nil {
		return fwv1.TransferStats{}, err
	}
	return fwv1.TransferStats{Received: int64(len(b)), Full: c.Size}, nil
}

// nodeAnnotations keeps the annotations of the Node the node last
// reported.
type nodeSink struct {
	*sink
	mu  sync.Mutex
	ann map[string]string
}

func (s *nodeSink) ApplyStatus(ctx context.Context, node string, it wire.StatusItem) error {
	if it.Kind == wire.KindNodeStatus {
		var n corev1.Node
		if _, _, err := testCodec.Decode(it.Object, nil, &n); err == nil {
			s.mu.Lock()
			s.ann = n.Annotations
			s.mu.Unlock()
		}
	}
	return s.sink.ApplyStatus(ctx, node, it)
}

func (s *nodeSink) firmware() *fwv1.NodeFirmware {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := fwv1.DecodeNodeFirmware(s.ann[fwv1.AnnotationState])
	if err != nil {
		return nil
	}
	return n
}

// release signs a release of one agent component with key.
func release(t *testing.T, name, version string, key ed25519.PrivateKey, artifact []byte, expires time.Time) (env []byte, c manifest.Component) {
	t.Helper()
	c, err := manifest.BuildComponent("agent", manifest.KindAgent, "linux", "amd64", "", strings.NewReader(string(artifact)), 4096)
	if err != nil {
		t.Fatal(err)
	}
	env, err = manifest.Sign(&manifest.Manifest{Name: name, Version: version, Components: []manifest.Component{c},
		Created: time.Now().Add(-time.Hour).UTC().Truncate(time.Second), Expires: expires.UTC().Truncate(time.Second)}, key)
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// trustEvent puts the trust set of the release key pub in the hub's
// views at revision rev.
func trustEvent(t *testing.T, rev int64, pub ed25519.PublicKey) view.Event {
	t.Helper()
	pem, err := manifest.MarshalPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: wire.FirmwareTrustKey.Name, Namespace: wire.FirmwareTrustKey.Namespace},
		Data:       map[string]string{manifest.KeyID(pub) + ".pub": string(pem), "threshold": "1"},
	}
	return view.Event{Revision: rev, Key: wire.FirmwareTrustKey, Raw: encode(t, cm)}
}

// offerEvent puts the node's Node, offered release at version with a
// health window, in the hub's views at revision rev.
func offerEvent(t *testing.T, rev int64, release, version string, window time.Duration) view.Event {
	t.Helper()
	o := fwv1.Offer{Rollout: "ro", Release: release, Version: version, Action: fwv1.OfferInstall, HealthWindow: metav1.Duration{Duration: window}}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{fwv1.AnnotationOffer: o.Encode()}}}
	return view.Event{Revision: rev, Key: wire.Key{Resource: wire.ResourceNodes, Name: node}, Raw: encode(t, n)}
}

// startFirmwareHub starts a hub whose status reports go to the returned
// sink, for the node's firmware annotation.
func startFirmwareHub(t *testing.T) (*testHub, *nodeSink) {
	t.Helper()
	ns := &nodeSink{sink: &sink{pods: map[string]corev1.PodPhase{}}}
	return startHubWith(t, func(cfg *server.Config) { cfg.Sink = ns }), ns
}

// firmwareAgent returns the config of an agent on rt, with data in dir,
// that takes releases from src into slots and dials h (nil: a hub that
// is not there).
func firmwareAgent(t *testing.T, dir string, rt *fake.Runtime, h *testHub, slots *fakeSlots, src agent.FirmwareSource) testAgent {
	t.Helper()
	ta := newAgentConfig(t, dir, rt)
	if h != nil {
		ta.cfg.HubAddr, ta.cfg.CAHash = h.addr, h.caHash
	}
	ta.cfg.Firmware = &agent.FirmwareConfig{Slots: slots, Source: src, OS: "linux", Arch: "amd64"}
	return ta
}

// startAgent runs an agent of ta's config until ctx ends, and returns
// what Run returns.
func startAgent(t *testing.T, ctx context.Context, ta testAgent) <-chan error {
	t.Helper()
	a, err := agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	return errc
}

// waitRestart waits for Run to return ErrRestart; what says what the
// agent was to restart for.
func waitRestart(t *testing.T, errc <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errc:
		if !errors.Is(err, agent.ErrRestart) {
			t.Fatalf("Run = %v, want ErrRestart", err)
		}
	case <-time.After(waitLong):
		t.Fatalf("the agent did not stop to restart: %s", what)
	}
}

// TestFirmwareUpdate: the agent takes the release its Node is offered:
// it verifies the manifest with the keys of its view, fetches the
// artifact, installs it and stops to restart into it; started again on
// trial, it commits once connected with its pods running, and says so on
// its Node. A manifest signed with another key is refused and nothing is
// installed.
func TestFirmwareUpdate(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	artifact := []byte(strings.Repeat("new agent ", 500))
	good, c := release(t, "r2", "2.0.0", key, artifact, time.Now().Add(time.Hour))
	forged, _ := release(t, "r3", "3.0.0", otherKey, artifact, time.Now().Add(time.Hour))
	src := &memSource{envelopes: map[string][]byte{"r2": good, "r3": forged}, blobs: map[string][]byte{c.SHA256: artifact}}
	slots := &fakeSlots{st: agent.SlotState{Committed: "1.0.0", Highest: "1.0.0"}}

	h, ns := startFirmwareHub(t)
	offer := func(rev int64, release, version string) {
		t.Helper()
		if err := h.x.Apply([]view.Event{offerEvent(t, rev, release, version, 6*time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.x.Apply([]view.Event{trustEvent(t, 1, pub)}); err != nil {
		t.Fatal(err)
	}

	ta := firmwareAgent(t, t.TempDir(), fake.New(fake.Config{}), h, slots, src)

	// A forged release: refused, nothing installed, the node says why.
	offer(2, "r3", "3.0.0")
	stop := run(t, ta)
	wait.For(t, waitLong, "forged release refused", func() (bool, string) {
		n := ns.firmware()
		return n != nil && n.State == fwv1.StateFailed && n.Reason == string(manifest.UnknownKey), fmt.Sprintf("%+v", n)
	})
	if slots.installed != nil {
		t.Fatalf("a forged release was installed: %v", slots.installed)
	}

	// The good release: installed, and the agent stops to restart.
	offer(3, "r2", "2.0.0")
	stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitRestart(t, startAgent(t, ctx, ta), "into the new version")
	if got := string(slots.installed["agent"]); got != string(artifact) {
		t.Fatalf("installed %d bytes, want the release's %d", len(got), len(artifact))
	}

	// Started again on trial: healthy, committed.
	run(t, ta)
	wait.For(t, waitLong, "trial committed", func() (bool, string) {
		n := ns.firmware()
		return n != nil && n.State == fwv1.StateUpdated && n.Version == "2.0.0", fmt.Sprintf("%+v", n)
	})
	if slots.State().Committed != "2.0.0" {
		t.Fatalf("slots = %+v", slots.State())
	}
}

// TestFirmwareRefusals: a tampered artifact, a release signed with an
// unknown key, an expired manifest and a downgrade are refused with their
// reason on the Node and nothing is installed; a downgrade the manifest's
// signed allowDowngradeFrom covers is installed.
func TestFirmwareRefusals(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	artifact := []byte(strings.Repeat("agent ", 2000))
	sign := func(version, allow string, k ed25519.PrivateKey, expires time.Time) ([]byte, manifest.Component) {
		c, err := manifest.BuildComponent("agent", manifest.KindAgent, "linux", "amd64", "", strings.NewReader(string(artifact)), 4096)
		if err != nil {
			t.Fatal(err)
		}
		env, err := manifest.Sign(&manifest.Manifest{Name: "r", Version: version, Components: []manifest.Component{c},
			Created: time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second), Expires: expires.UTC().Truncate(time.Second),
			AllowDowngradeFrom: allow}, k)
		if err != nil {
			t.Fatal(err)
		}
		return env, c
	}
	soon := time.Now().Add(time.Hour)
	tampered := append([]byte(nil), artifact...)
	tampered[100] ^= 1
	for _, tt := range []struct {
		name, version, allow string
		key                  ed25519.PrivateKey
		expires              time.Time
		blob                 []byte
		want                 string // the reason refused, "" for installed
	}{
		{name: "tampered", version: "3.0.0", key: key, expires: soon, blob: tampered, want: string(manifest.DigestMismatch)},
		{name: "unknown-key", version: "3.0.0", key: otherKey, expires: soon, want: string(manifest.UnknownKey)},
		{name: "expired", version: "3.0.0", key: key, expires: time.Now().Add(-time.Hour), want: string(manifest.Expired)},
		{name: "downgrade", version: "1.0.0", key: key, expires: soon, want: string(manifest.Downgrade)},
		{name: "allowed-downgrade", version: "1.0.0", allow: "2.0.0", key: key, expires: soon},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, c := sign(tt.version, tt.allow, tt.key, tt.expires)
			blob := tt.blob
			if blob == nil {
				blob = artifact
			}
			src := &memSource{envelopes: map[string][]byte{"r": env}, blobs: map[string][]byte{c.SHA256: blob}}
			slots := &fakeSlots{st: agent.SlotState{Committed: "2.0.0", Highest: "2.0.0"}}
			h, ns := startFirmwareHub(t)
			if err := h.x.Apply([]view.Event{trustEvent(t, 1, pub), offerEvent(t, 2, "r", tt.version, time.Minute)}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := startAgent(t, ctx, firmwareAgent(t, t.TempDir(), fake.New(fake.Config{}), h, slots, src))
			if tt.want == "" {
				waitRestart(t, errc, "the allowed downgrade installed")
				if string(slots.installed["agent"]) != string(artifact) {
					t.Fatal("the allowed downgrade installed other bytes")
				}
				return
			}
			wait.For(t, waitLong, "refused with "+tt.want, func() (bool, string) {
				n := ns.firmware()
				return n != nil && n.State == fwv1.StateFailed && n.Reason == tt.want, fmt.Sprintf("%+v", n)
			})
			cancel()
			if err := <-errc; err != nil {
				t.Fatalf("Run = %v", err)
			}
			if slots.installed != nil {
				t.Fatalf("installed %d bytes of a refused release", len(slots.installed["agent"]))
			}
		})
	}
}

// TestFirmwareTrialExpires: a new agent on trial that cannot reach the
// hub reverts when its window ends, and stops to restart into the
// committed version.
func TestFirmwareTrialExpires(t *testing.T) {
	slots := &fakeSlots{st: agent.SlotState{Committed: "1.0.0", Highest: "1.0.0",
		Trial: &agent.SlotTrial{Release: "r2", Version: "2.0.0", Deadline: time.Now().Add(2 * time.Second), Window: 3 * time.Second, Agent: true}}}
	ta := firmwareAgent(t, t.TempDir(), fake.New(fake.Config{}), nil, slots, &memSource{})
	waitRestart(t, startAgent(t, context.Background(), ta), "the trial's window ended")
	if st := slots.State(); st.Trial != nil || len(st.Failed) != 1 || st.Failed[0] != "2.0.0" || st.Committed != "1.0.0" {
		t.Fatalf("slots after the window: %+v", st)
	}
}

// TestFirmwareWaitsForTrust: a node offered a release before it knows any
// release key waits, Offered, saying why, and installs the release once
// the trust set reaches its view.
func TestFirmwareWaitsForTrust(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	artifact := []byte(strings.Repeat("new agent ", 500))
	env, c := release(t, "r2", "2.0.0", key, artifact, time.Now().Add(time.Hour))
	src := &memSource{envelopes: map[string][]byte{"r2": env}, blobs: map[string][]byte{c.SHA256: artifact}}
	slots := &fakeSlots{st: agent.SlotState{Committed: "1.0.0", Highest: "1.0.0"}}
	h, ns := startFirmwareHub(t)
	if err := h.x.Apply([]view.Event{offerEvent(t, 1, "r2", "2.0.0", time.Minute)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := startAgent(t, ctx, firmwareAgent(t, t.TempDir(), fake.New(fake.Config{}), h, slots, src))
	wait.For(t, waitLong, "waiting for release keys", func() (bool, string) {
		s := ns.firmware()
		return s != nil && s.State == fwv1.StateOffered && s.Reason == agent.ReasonNoTrust, fmt.Sprintf("%+v", s)
	})
	if err := h.x.Apply([]view.Event{trustEvent(t, 2, pub)}); err != nil {
		t.Fatal(err)
	}
	waitRestart(t, errc, "the release installed once the keys came")
}
