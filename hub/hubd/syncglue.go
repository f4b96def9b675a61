package hubd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/outpost-mesh/outpost/hub/admission"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/hub/pki"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// syncGlue adapts the hub to the sync server: it admits nodes (Authority)
// and applies what they send as their own identity through the API
// (Sink). The nodes' Leases are nodelifecycle.Presence's.
type syncGlue struct {
	api      kubernetes.Interface // in-process, as the user of each context
	pki      *pki.PKI
	certLife time.Duration
	log      *slog.Logger
	now      func() time.Time
	decoder  runtime.Decoder
	joins    *auth.JoinLimiter // budgets the failed joins
}

func newSyncGlue(api kubernetes.Interface, p *pki.PKI, certLife time.Duration, joins *auth.JoinLimiter, log *slog.Logger) *syncGlue {
	return &syncGlue{
		api: api, pki: p, certLife: certLife, joins: joins, log: log, now: time.Now,
		decoder: protobuf.NewSerializer(scheme.Scheme, scheme.Scheme),
	}
}

// asNode makes the requests of ctx through the in-process client act as
// node: nodelifecycle.Presence renews each node's Lease so.
func asNode(ctx context.Context, node string) context.Context {
	return auth.WithUser(ctx, nodeUser(node))
}

// wireError maps an API error to what a node is told.
func wireError(err error) error {
	var code wire.ErrorCode
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		code = wire.CodeForbidden
	case apierrors.IsNotFound(err):
		code = wire.CodeNotFound
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		code = wire.CodeInvalid
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		code = wire.CodeConflict
	case apierrors.IsUnauthorized(err):
		code = wire.CodeUnauthorized
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsServiceUnavailable(err):
		code = wire.CodeUnavailable
	default:
		code = wire.CodeInternal
	}
	return &wire.Error{Code: code, Message: err.Error()}
}

// Join admits a node with a bootstrap token: it checks the token, signs the
// node's CSR and registers its Node with the hostname and site labels. A
// source address or token id with too many failed joins of late is refused
// before anything else, with CodeUnavailable and when to try again.
func (g *syncGlue) Join(ctx context.Context, from netip.Addr, req *wire.JoinRequest) ([]byte, []byte, error) {
	id, _, parseErr := auth.ParseToken(req.Token) // id is "" for a malformed token
	if err := g.joins.Begin(from, id, g.now()); err != nil {
		we := &wire.Error{Code: wire.CodeUnavailable, Message: err.Error()}
		if tm := (*auth.TooManyFailedJoinsError)(nil); errors.As(err, &tm) {
			we.RetryAfter = tm.RetryAfter
		}
		return nil, nil, we
	}
	cert, ca, tokenErr, err := g.join(ctx, req, id, parseErr)
	if tokenErr == nil {
		g.joins.Refund(from, id, g.now()) // only a refused token counts
	}
	return cert, ca, err
}

// join is Join once the limiter let it through, for the token of id (or
// parseErr); tokenErr is why the token was refused, if it was.
func (g *syncGlue) join(ctx context.Context, req *wire.JoinRequest, id string, parseErr error) (cert, ca []byte, tokenErr, err error) {
	if parseErr != nil {
		return nil, nil, parseErr, &wire.Error{Code: wire.CodeUnauthorized, Message: parseErr.Error()}
	}
	if errs := validation.IsDNS1123Subdomain(req.NodeName); len(errs) > 0 {
		return nil, nil, nil, &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("node name %q: %v", req.NodeName, errs)}
	}
	hctx := auth.WithUser(ctx, hubUser)
	secret, err := g.api.CoreV1().Secrets(metav1.NamespaceSystem).Get(hctx, auth.BootstrapTokenSecretName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		secret, err = nil, nil
	}
	if err != nil {
		return nil, nil, nil, &wire.Error{Code: wire.CodeUnavailable, Message: "read bootstrap token: " + err.Error()}
	}
	site, err := auth.ValidateBootstrapToken(secret, req.Token, g.now())
	if err != nil {
		// The node learns only what PublicTokenError lets it; the hub's
		// log has err, wrapped.
		public := auth.PublicTokenError(err)
		we := &wire.Error{Code: wire.CodeUnauthorized, Message: public.Error()}
		if public == err {
			return nil, nil, err, we
		}
		return nil, nil, err, fmt.Errorf("%w (%w)", we, err)
	}
	if req.Site != "" && site != "" && req.Site != site {
		return nil, nil, nil, &wire.Error{Code: wire.CodeForbidden, Message: fmt.Sprintf("the token is for site %q, not %q", site, req.Site)}
	}
	if site == "" {
		site = req.Site
	}
	cert, err = pki.SignNodeCSR(g.pki.CA, g.pki.CAKey, req.CSR, req.NodeName, g.certLife, g.now())
	if err != nil {
		return nil, nil, nil, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	if err := g.registerNode(hctx, req.NodeName, site); err != nil {
		return nil, nil, nil, wireError(err)
	}
	return cert, g.pki.CA.Raw, nil, nil
}

// registerNode creates the node's Node, or makes sure an existing one has
// its hostname and site labels.
func (g *syncGlue) registerNode(ctx context.Context, name, site string) error {
	labels := map[string]string{corev1.LabelHostname: name}
	if site != "" {
		labels[wire.SiteLabel] = site
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	_, err := g.api.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := g.api.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	if cur.Labels[corev1.LabelHostname] == name && cur.Labels[wire.SiteLabel] == labels[wire.SiteLabel] {
		return nil
	}
	maps.Copy(cur.Labels, labels)
	_, err = g.api.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// Renew signs a new certificate for a connected node.
func (g *syncGlue) Renew(ctx context.Context, node string, csr []byte) ([]byte, error) {
	cert, err := pki.SignNodeCSR(g.pki.CA, g.pki.CAKey, csr, node, g.certLife, g.now())
	if err != nil {
		return nil, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	return cert, nil
}

// decode decodes an object a node sent, of the type want is.
func (g *syncGlue) decode(raw []byte, want runtime.Object) error {
	if _, _, err := g.decoder.Decode(raw, nil, want); err != nil {
		return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("decode %T: %v", want, err)}
	}
	return nil
}

// ApplyStatus applies one status item as node. What the node may not
// write is refused by the API's authorizer, as for any client.
func (g *syncGlue) ApplyStatus(ctx context.Context, node string, it wire.StatusItem) error {
	ctx = auth.WithUser(ctx, nodeUser(node))
	switch it.Kind {
	case wire.KindPodStatus:
		var pod corev1.Pod
		if err := g.decode(it.Object, &pod); err != nil {
			return err
		}
		return wireError(g.podStatus(ctx, it.Key, &pod))
	case wire.KindNodeStatus:
		var n corev1.Node
		if err := g.decode(it.Object, &n); err != nil {
			return err
		}
		if it.Key.Name != node || n.Name != node {
			return &wire.Error{Code: wire.CodeForbidden, Message: fmt.Sprintf("node %q may only report its own status, not %q", node, n.Name)}
		}
		return wireError(g.nodeStatus(ctx, &n))
	case wire.KindEvent:
		var ev corev1.Event
		if err := g.decode(it.Object, &ev); err != nil {
			return err
		}
		if ev.Namespace != it.Key.Namespace || ev.Name != it.Key.Name {
			return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("event %s/%s sent as %v", ev.Namespace, ev.Name, it.Key)}
		}
		ev.ResourceVersion = ""
		events := g.api.CoreV1().Events(ev.Namespace)
		_, err := events.Create(ctx, &ev, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// A resent event, or a repeat the node counted on it, as
			// kubelet's event correlator does: the count and last time
			// are the repeat's. Repeats come in the order they happened.
			err = nil
			if ev.Count > 1 {
				patch, _ := json.Marshal(map[string]any{"count": ev.Count, "lastTimestamp": ev.LastTimestamp})
				_, err = events.Patch(ctx, ev.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
		}
		return wireError(err)
	case wire.KindPodTerminated:
		var pod corev1.Pod
		if err := g.decode(it.Object, &pod); err != nil {
			return err
		}
		zero := int64(0)
		err := g.api.CoreV1().Pods(it.Key.Namespace).Delete(ctx, it.Key.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			err = nil // gone already, or a newer pod of that name
		}
		return wireError(err)
	case wire.KindMirrorPod:
		var pod corev1.Pod
		if err := g.decode(it.Object, &pod); err != nil {
			return err
		}
		return wireError(g.mirrorPod(ctx, node, &pod))
	case wire.KindMirrorPodDelete:
		return wireError(g.deleteMirror(ctx, node, it.Key))
	}
	return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("unknown status kind %d", it.Kind)}
}

// podStatus replaces the status of the pod at key with pod's, if the pod
// there is still the one the node reported on (same UID). It sends only
// the pod's status, in a JSON patch that replaces it whole and sets the
// UID, which the API takes as a precondition, unconditionally but for
// that, as kubelet's status manager patches: the hub keeps the rest of
// the stored pod (a status write may change metadata, so a PUT of the
// status alone would clear the pod's labels), and there is nothing to
// read first.
func (g *syncGlue) podStatus(ctx context.Context, key wire.Key, pod *corev1.Pod) error {
	pods := g.api.CoreV1().Pods(key.Namespace)
	ops := []map[string]any{{"op": "replace", "path": "/status", "value": pod.Status}}
	if pod.UID != "" {
		ops = append(ops, map[string]any{"op": "replace", "path": "/metadata/uid", "value": pod.UID})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	// As Patch, without decoding the answer, which nobody reads.
	err = g.api.CoreV1().RESTClient().Patch(types.JSONPatchType).Namespace(key.Namespace).Resource("pods").Name(key.Name).
		SubResource("status").Body(patch).Do(ctx).Error()
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted meanwhile: nothing to report on
	case apierrors.IsConflict(err) && pod.UID != "":
		// Most likely a newer pod of that name, and the report is stale;
		// anything else is worth another try.
		cur, gerr := pods.Get(ctx, key.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) || gerr == nil && cur.UID != pod.UID {
			return nil
		}
	}
	return err
}

// nodeStatus replaces the node's status, and sets the labels it reports
// that a node may set on itself (admission.NodeMaySetLabel); the others,
// such as the site label it learnt at join, are the hub's or an
// administrator's, and a report does not remove labels. Nothing else of
// the report is taken: a node's spec is not the node's to set.
func (g *syncGlue) nodeStatus(ctx context.Context, n *corev1.Node) error {
	nodes := g.api.CoreV1().Nodes()
	for attempt := 0; ; attempt++ {
		cur, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		for k, v := range n.Labels {
			if old, ok := cur.Labels[k]; (!ok || old != v) && admission.NodeMaySetLabel(k) {
				cur.Labels[k], changed = v, true
			}
		}
		// The annotations a node says of itself, and no other.
		for _, k := range wire.NodeAnnotations {
			v, set := n.Annotations[k]
			if old, had := cur.Annotations[k]; set == had && old == v {
				continue
			}
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			if set {
				cur.Annotations[k] = v
			} else {
				delete(cur.Annotations, k)
			}
			changed = true
		}
		if changed {
			if cur, err = nodes.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				if apierrors.IsConflict(err) && attempt < 3 {
					continue
				}
				return err
			}
		}
		// The report replaces the status but for SiteReachable, which is
		// the hub's (nodelifecycle decides it from the node's site
		// peers): a report that does not carry it keeps the hub's.
		site, hasSite := nodeCondition(cur.Status.Conditions, nodelifecycle.ConditionSiteReachable)
		cur.Status = n.Status
		if _, has := nodeCondition(cur.Status.Conditions, nodelifecycle.ConditionSiteReachable); hasSite && !has {
			cur.Status.Conditions = append(slices.Clone(cur.Status.Conditions), site)
		}
		_, err = nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 3 {
			continue
		}
		return err
	}
}

// nodeCondition returns the condition of type t in conds, and whether
// there is one.
func nodeCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType) (corev1.NodeCondition, bool) {
	for _, c := range conds {
		if c.Type == t {
			return c, true
		}
	}
	return corev1.NodeCondition{}, false
}

// mirrorPod creates the mirror of a static pod of node, replacing one of an
// older manifest.
func (g *syncGlue) mirrorPod(ctx context.Context, node string, pod *corev1.Pod) error {
	if pod.Spec.NodeName != node || pod.Annotations[wire.AnnotationMirror] == "" {
		return &wire.Error{Code: wire.CodeForbidden, Message: fmt.Sprintf("node %q may only mirror its own static pods", node)}
	}
	pods := g.api.CoreV1().Pods(pod.Namespace)
	pod.ResourceVersion, pod.UID = "", ""
	status := pod.Status
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		if cur.Annotations[wire.AnnotationMirror] == "" || cur.Spec.NodeName != node {
			return &wire.Error{Code: wire.CodeConflict, Message: fmt.Sprintf("pod %s/%s exists and is not a mirror of this node's", pod.Namespace, pod.Name)}
		}
		if cur.Annotations[wire.AnnotationMirror] != pod.Annotations[wire.AnnotationMirror] {
			// The manifest changed: the old mirror goes, the new comes.
			zero := int64(0)
			if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &cur.UID}}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			created, err = pods.Create(ctx, pod, metav1.CreateOptions{})
		} else {
			created, err = cur, nil
		}
	}
	if err != nil {
		return err
	}
	created.Status = status
	_, err = pods.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

func (g *syncGlue) deleteMirror(ctx context.Context, node string, key wire.Key) error {
	pods := g.api.CoreV1().Pods(key.Namespace)
	cur, err := pods.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.Annotations[wire.AnnotationMirror] == "" || cur.Spec.NodeName != node {
		return &wire.Error{Code: wire.CodeForbidden, Message: fmt.Sprintf("pod %s/%s is not a mirror pod of node %q", key.Namespace, key.Name, node)}
	}
	zero := int64(0)
	err = pods.Delete(ctx, key.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &cur.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
