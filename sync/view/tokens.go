package view

import (
	"cmp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/internal/podrefs"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Service account tokens travel in a node's view as objects of
// wire.ResourcePodTokens, one per pod, which the hub mints for the node
// the pod is bound to rather than reads from its store. The index knows
// what each pod needs (TokenSource); a Session tells which of the node's
// pods need tokens (Session.TokenPods); Tokens, one per session, keeps
// what the node holds and decides what to mint, when, and what to delete.
// The sync server does the minting and sends the objects.

// TokenSource is one service account token a pod reads on its node: the
// serviceAccountToken source of a projected volume, or the automounted
// token (upstream's kube-api-access-* volume, which its admission adds to
// every pod that does not opt out).
type TokenSource struct {
	// Volume is the projected volume's name, wire.AutomountVolume for
	// the automounted token.
	Volume string
	// Path is the token file's path in the volume.
	Path string
	// Audience is the one audience asked for, "" for the API's own.
	Audience string
	// ExpirationSeconds is the life asked for: the source's, 3600 when
	// it leaves it out (the API's default); 3607 for the automounted
	// token, as upstream's admission asks. The hub grants a pod on a
	// node more (hub/auth's EdgePodTokenLifetime).
	ExpirationSeconds int64
	// ServiceAccountDecides marks the automounted token of a pod that
	// leaves automountServiceAccountToken unset: its service account's
	// own setting then decides (see Declined).
	ServiceAccountDecides bool
}

// Token lives asked for when the source says none, and for the
// automounted token.
const (
	DefaultTokenExpirationSeconds   = 3600
	AutomountTokenExpirationSeconds = 3607
	// AutomountTokenPath is the path of the automounted token in its
	// volume, /var/run/secrets/kubernetes.io/serviceaccount.
	AutomountTokenPath = "token"
)

// Declined reports whether a service account whose
// automountServiceAccountToken is saAutomount (nil: unset) declines the
// token of s: only the automounted token of a pod that leaves the choice
// to it, and only when it says false, as upstream's admission decides.
func (s TokenSource) Declined(saAutomount *bool) bool {
	return s.ServiceAccountDecides && saAutomount != nil && !*saAutomount
}

// tokenNeeds returns what pod needs minted for its node, nil for nothing:
// a pod that has terminated runs nothing that could use a token (and the
// hub refuses the tokens of such a pod).
func tokenNeeds(pod *corev1.Pod) *podTokens {
	if pod.UID == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	sources := tokenSources(pod)
	if len(sources) == 0 {
		return nil
	}
	sa := ""
	podrefs.Visit(pod, func(resource, name string) bool {
		if resource == podrefs.ServiceAccounts {
			sa = name
			return false
		}
		return true
	})
	return &podTokens{uid: string(pod.UID), serviceAccount: sa, sources: sources}
}

// automountVolumePrefix begins the name of the volume upstream's
// admission adds for the automounted token: a pod that already has one
// (made elsewhere, or by an admission that adds it) gets its token from
// that volume's projected source instead.
const automountVolumePrefix = "kube-api-access-"

// tokenSources returns the tokens pod reads, sorted by volume and path,
// without duplicates.
func tokenSources(pod *corev1.Pod) []TokenSource {
	var out []TokenSource
	hasAPIAccess := false
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if strings.HasPrefix(v.Name, automountVolumePrefix) {
			hasAPIAccess = true
		}
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			sat := src.ServiceAccountToken
			if sat == nil || sat.Path == "" {
				continue
			}
			exp := int64(DefaultTokenExpirationSeconds)
			if sat.ExpirationSeconds != nil && *sat.ExpirationSeconds > 0 {
				exp = *sat.ExpirationSeconds
			}
			out = append(out, TokenSource{Volume: v.Name, Path: sat.Path, Audience: sat.Audience, ExpirationSeconds: exp})
		}
	}
	if auto := pod.Spec.AutomountServiceAccountToken; (auto == nil || *auto) && !hasAPIAccess {
		out = append(out, TokenSource{
			Volume: wire.AutomountVolume, Path: AutomountTokenPath,
			ExpirationSeconds: AutomountTokenExpirationSeconds, ServiceAccountDecides: auto == nil,
		})
	}
	slices.SortFunc(out, func(a, b TokenSource) int {
		return cmp.Or(strings.Compare(a.Volume, b.Volume), strings.Compare(a.Path, b.Path))
	})
	return slices.CompactFunc(out, func(a, b TokenSource) bool { return a.Volume == b.Volume && a.Path == b.Path })
}

// TokenPod is a pod of a node's view that needs service account tokens.
type TokenPod struct {
	// Key is the pod's key.
	Key wire.Key
	// UID and ServiceAccount are the pod's.
	UID            string
	ServiceAccount string
	// Sources are the tokens it reads, sorted by volume and path. They
	// are shared: the caller must not modify them.
	Sources []TokenSource
}

// TokensKey returns the key of the pod's tokens in the view.
func (p TokenPod) TokensKey() wire.Key { return wire.PodTokensKey(p.Key.Namespace, p.UID) }

// TokenPods returns the pods of the node's view that need tokens, sorted
// by key, as of the session's last result, and a generation that changes
// whenever the result may have: a caller may skip the call while
// TokenGeneration returns the one it has. The caller owns the slice.
func (s *Session) TokenPods() ([]TokenPod, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TokenPod
	for key, pi := range s.pods {
		if t := pi.tokens; t != nil {
			out = append(out, TokenPod{Key: key, UID: t.uid, ServiceAccount: t.serviceAccount, Sources: t.sources})
		}
	}
	slices.SortFunc(out, func(a, b TokenPod) int { return compareKeys(a.Key, b.Key) })
	return out, s.podsGen
}

// TokenGeneration returns the generation TokenPods would return now.
func (s *Session) TokenGeneration() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.podsGen
}

// TokenPolicy says when the hub mints a node's tokens again.
type TokenPolicy struct {
	// MaxAge bounds the age of the tokens a connected node holds: they
	// are minted again once 80% of their life has passed, as kubelet
	// refreshes, or MaxAge after they were issued if that comes first.
	// A node may lose the hub at any moment and must then live on what
	// it holds: with a week's life (the offline tolerance) and a day's
	// MaxAge, a node always holds at least six days, where 80% of a
	// week alone would leave it a day and a half. A day is also
	// kubelet's own cap. 0: no cap.
	MaxAge time.Duration
	// MinRetry and MaxRetry bound the back-off of a pod whose tokens
	// could not be minted: from MinRetry doubling to MaxRetry.
	MinRetry, MaxRetry time.Duration
	// MaxMints bounds the pods one Plan mints for, so that a node with
	// many pods due at once does not hold its other changes back.
	MaxMints int
}

// DefaultTokenPolicy returns the defaults: a day's MaxAge, retries from a
// second to five minutes, 32 mints a plan.
func DefaultTokenPolicy() TokenPolicy {
	return TokenPolicy{MaxAge: 24 * time.Hour, MinRetry: time.Second, MaxRetry: 5 * time.Minute, MaxMints: 32}
}

// RefreshAt returns when tokens issued at iat and expiring at exp are to
// be minted again: at 80% of their life, or MaxAge after iat if sooner.
func (p TokenPolicy) RefreshAt(iat, exp time.Time) time.Time {
	at := iat.Add(exp.Sub(iat) / 5 * 4)
	if p.MaxAge > 0 && iat.Add(p.MaxAge).Before(at) {
		at = iat.Add(p.MaxAge)
	}
	return at
}

// TokensRevision returns the revision of a podtokens object of tokens
// (see wire.PodTokens): the earliest of their RefreshAt in Unix seconds,
// rounded up so that the revision is never before it, at least 1.
func (p TokenPolicy) TokensRevision(tokens []wire.PodToken) int64 {
	var at time.Time
	for i, t := range tokens {
		if r := p.RefreshAt(t.IssuedAt, t.Expiry); i == 0 || r.Before(at) {
			at = r
		}
	}
	secs := at.Unix()
	if at.After(time.Unix(secs, 0)) {
		secs++
	}
	return max(secs, 1)
}

// Tokens is what one session knows of the podtokens objects its node
// holds: it decides which pods to mint for, when, and which objects to
// delete. No I/O, no clock. It is not safe for concurrent use.
type Tokens struct {
	p TokenPolicy
	// held maps the podtokens keys the node holds to when they are due.
	held map[wire.Key]time.Time
	// none maps the keys of pods that have nothing to hold (their
	// service account declined the only token) to when to ask again.
	none map[wire.Key]time.Time
	// retry maps the keys of pods whose mint failed to their back-off.
	retry map[wire.Key]backoff
}

type backoff struct {
	at   time.Time
	wait time.Duration
}

// NewTokens returns what a node holds that listed held (wire.Hello's
// Tokens) at now: entries of other resources are ignored, and a refresh
// time past now+MaxAge (a hub's clock that went back, a bad entry) is
// taken as now+MaxAge.
func NewTokens(p TokenPolicy, held []wire.InventoryEntry, now time.Time) *Tokens {
	t := &Tokens{p: p, held: make(map[wire.Key]time.Time, len(held)), none: map[wire.Key]time.Time{}, retry: map[wire.Key]backoff{}}
	for _, e := range held {
		if e.Key.Resource != wire.ResourcePodTokens || e.Key.Validate() != nil {
			continue
		}
		at := time.Unix(e.Revision, 0)
		if p.MaxAge > 0 && at.After(now.Add(p.MaxAge)) {
			at = now.Add(p.MaxAge)
		}
		t.held[e.Key] = at
	}
	return t
}

// TokenPlan is what a node's tokens need now.
type TokenPlan struct {
	// Mint lists the pods to mint tokens for, in the order given to
	// Plan: those whose tokens the node lacks or holds past their
	// refresh time. Report each outcome with Minted, Empty or Failed.
	Mint []TokenPod
	// Delete lists the podtokens objects the node holds of pods that
	// are no longer on it, sorted. Report each with Deleted once sent.
	Delete []wire.Key
	// Next is when to plan again at the latest (the earliest refresh or
	// retry ahead); zero when nothing is ahead. It is now when more pods
	// are due than Mint holds.
	Next time.Time
}

// Plan returns what the node's tokens need at now, pods being the node's
// pods that need tokens (Session.TokenPods).
func (t *Tokens) Plan(pods []TokenPod, now time.Time) TokenPlan {
	var plan TokenPlan
	soon := func(at time.Time) {
		if plan.Next.IsZero() || at.Before(plan.Next) {
			plan.Next = at
		}
	}
	live := make(map[wire.Key]struct{}, len(pods))
	for _, p := range pods {
		key := p.TokensKey()
		live[key] = struct{}{}
		if b, ok := t.retry[key]; ok && now.Before(b.at) {
			soon(b.at)
			continue
		}
		if at, ok := t.held[key]; ok && now.Before(at) {
			soon(at)
			continue
		}
		if at, ok := t.none[key]; ok && now.Before(at) {
			soon(at)
			continue
		}
		if t.p.MaxMints > 0 && len(plan.Mint) == t.p.MaxMints {
			soon(now)
			continue
		}
		plan.Mint = append(plan.Mint, p)
	}
	for key := range t.held {
		if _, ok := live[key]; !ok {
			plan.Delete = append(plan.Delete, key)
		}
	}
	slices.SortFunc(plan.Delete, compareKeys)
	for key := range t.none {
		if _, ok := live[key]; !ok {
			delete(t.none, key)
		}
	}
	for key := range t.retry {
		if _, ok := live[key]; !ok {
			delete(t.retry, key)
		}
	}
	return plan
}

// Minted records that the node was sent tokens of key due at refreshAt.
func (t *Tokens) Minted(key wire.Key, refreshAt time.Time) {
	t.held[key] = refreshAt
	delete(t.none, key)
	delete(t.retry, key)
}

// Empty records that the pod of key has no token to hold at now (its
// service account declined the only one): it is asked again after
// MaxAge, or a day with no MaxAge. It reports whether the node holds an
// object of key, which the caller then deletes (and reports Deleted).
func (t *Tokens) Empty(key wire.Key, now time.Time) bool {
	again := t.p.MaxAge
	if again <= 0 {
		again = 24 * time.Hour
	}
	t.none[key] = now.Add(again)
	delete(t.retry, key)
	_, held := t.held[key]
	return held
}

// Deleted records that the node was sent the deletion of key.
func (t *Tokens) Deleted(key wire.Key) { delete(t.held, key) }

// Failed records that the tokens of key could not be minted at now: the
// pod is not tried again before its back-off.
func (t *Tokens) Failed(key wire.Key, now time.Time) {
	b := t.retry[key]
	b.wait = min(max(2*b.wait, t.p.MinRetry), t.p.MaxRetry)
	b.at = now.Add(b.wait)
	t.retry[key] = b
}

// Holds reports whether the node holds an object of key, and when it is
// due.
func (t *Tokens) Holds(key wire.Key) (time.Time, bool) {
	at, ok := t.held[key]
	return at, ok
}
