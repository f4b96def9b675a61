package agent_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// minter mints "<node>/<pod>/<path>" tokens living a week.
type minter struct{}

func (minter) MintPodTokens(_ context.Context, node string, pod view.TokenPod, now time.Time) ([]wire.PodToken, error) {
	var out []wire.PodToken
	for _, s := range pod.Sources {
		out = append(out, wire.PodToken{Volume: s.Volume, Path: s.Path, Token: node + "/" + pod.Key.Name + "/" + s.Path,
			IssuedAt: now.Truncate(time.Second), Expiry: now.Add(7 * 24 * time.Hour).Truncate(time.Second)})
	}
	return out, nil
}

// TestPodTokensOffline: the tokens the hub mints for a pod reach the
// agent, which keeps them: after a restart without the hub, the pod's
// tokens are still there. An expired one is not handed out.
func TestPodTokensOffline(t *testing.T) {
	h := startHubWith(t, func(c *server.Config) { c.Tokens = minter{} })
	dir := t.TempDir()
	rt := fake.New(fake.Config{})
	ta := newAgentConfig(t, dir, rt)
	ta.cfg.HubAddr, ta.cfg.Token, ta.cfg.CAHash = h.addr, h.auth.token, h.caHash
	a, err := agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "agent Run", a.Run)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "nginx"}}, Volumes: []corev1.Volume{{
			Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "vault-token"}},
			}}},
		}}},
	}
	wait.For(t, waitLong, "connected", func() (bool, string) { return a.Connected(), "" })
	if err := h.x.Apply([]view.Event{{Revision: 1, Key: podKey("web"), Raw: encode(t, pod)}}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, waitLong, "web's tokens", func() (bool, string) {
		tok, ok := a.TokenFor(pod, "vault", "vault-token")
		return ok && tok.Token == node+"/web/vault-token", fmt.Sprint(tok)
	})
	if tok, ok := a.TokenFor(pod, wire.AutomountVolume, "token"); !ok || tok.Token != node+"/web/token" {
		t.Errorf("automounted token = %+v, %v", tok, ok)
	}
	other := pod.DeepCopy()
	other.UID = "uid-another-web"
	if tok, ok := a.TokenFor(other, "vault", "vault-token"); ok {
		t.Errorf("a pod of the same name and another UID gets %+v", tok)
	}
	if err := bg.Stop(); err != nil {
		t.Fatal(err)
	}

	// A reboot without the hub: the tokens are in the checkpoint. A
	// week and a second later, they are not handed out.
	h.stop()
	ta.cfg.HubAddr = deadHub(t)
	var later atomic.Int64 // how far ahead the agent's clock is
	ta.cfg.Clock = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
	a, err = agent.New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg = wait.Start(t, waitLong, "agent Run", a.Run)
	defer bg.Stop()
	wait.For(t, waitLong, "web's tokens offline", func() (bool, string) {
		tok, ok := a.TokenFor(pod, "vault", "vault-token")
		return ok && tok.Token == node+"/web/vault-token", fmt.Sprint(tok)
	})
	later.Store(int64(7*24*time.Hour + time.Second))
	if tok, ok := a.TokenFor(pod, "vault", "vault-token"); ok {
		t.Errorf("a week and a second later, TokenFor = %+v, want none: it expired", tok)
	}
}
