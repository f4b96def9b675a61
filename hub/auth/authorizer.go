package auth

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/internal/podrefs"
)

// Decision is the outcome of authorizing one request.
type Decision struct {
	Allowed bool
	// NotFound denies a node's pod status update or pod delete because the
	// pod it names does not exist: the answer is 404 NotFound, not 403, as
	// upstream's NodeRestriction answers it. A node confirming a deletion
	// the hub already carried out learns only that the pod is gone.
	NotFound bool
	// Reason says why a request was denied, for the end of the Forbidden
	// message; it may be empty, as upstream's often is.
	Reason string
	// NoOpinion is set by Decide for a request its rules leave to the
	// authorizer chained after them (RBAC): Allowed is then false, and
	// means nothing yet.
	NoOpinion bool
}

// Next is the authorizer chained after the Authorizer's own rules, as
// kube-apiserver chains RBAC after its Node authorizer: it decides what
// they leave open (see Decision.NoOpinion). Its methods must be safe for
// concurrent use; an error means nothing was decided.
type Next interface {
	Authorize(ctx context.Context, u User, a Attributes) (Decision, error)
}

// Pods looks up pods for the node rules. Its methods must be safe for
// concurrent use; the caller does not modify the pods returned.
type Pods interface {
	// Get returns the pod namespace/name, or nil and no error when there
	// is none.
	Get(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// OnNode returns the pods bound to node (spec.nodeName == node).
	OnNode(ctx context.Context, node string) ([]*corev1.Pod, error)
}

// Authorizer decides whether an authenticated user may make a request,
// with upstream's chain: its own rules first, then Next (RBAC) for what
// they leave open. Its own rules are:
//
//   - members of system:masters may do anything, as upstream's
//     privileged-group authorizer has it;
//   - nodes (user system:node:<name> in group system:nodes) get upstream's
//     Node authorizer and NodeRestriction rules for what the hub serves
//     (see Decide); what those rules cover they decide, and the rest is
//     Next's, as upstream's Node authorizer has no opinion on it;
//   - anyone may get /healthz, /livez, /readyz and /version, and any
//     authenticated user discovery and OpenAPI too (upstream's
//     system:public-info-viewer, system:discovery and system:basic-user
//     roles, whose bindings the hub reconciles at every start), so that
//     probes and discovery never wait on RBAC;
//
// Everything else, service accounts' requests and the hub's controllers'
// and scheduler's included, Next decides.
//
// Its methods are safe for concurrent use.
type Authorizer struct {
	pods Pods
	next Next
}

// NewAuthorizer returns an authorizer looking pods up in pods (non-nil),
// chained to next; with next nil, what its own rules leave open is
// denied.
func NewAuthorizer(pods Pods, next Next) *Authorizer {
	return &Authorizer{pods: pods, next: next}
}

// Authorize decides on u's request a, looking up the pods the decision
// depends on. An error means a lookup failed and nothing was decided.
func (z *Authorizer) Authorize(ctx context.Context, u User, a Attributes) (Decision, error) {
	d, check := decide(u, a)
	var pods []*corev1.Pod
	switch check {
	case checkNone:
		if d.NoOpinion {
			return z.chained(ctx, u, a)
		}
		return d, nil
	case checkBoundPod:
		p, err := z.pods.Get(ctx, a.Namespace, a.Name)
		if err != nil {
			return Decision{}, fmt.Errorf("authorize: get pod %s/%s: %w", a.Namespace, a.Name, err)
		}
		if p != nil {
			pods = []*corev1.Pod{p}
		}
	case checkReferenced:
		node, _ := u.NodeName()
		var err error
		if pods, err = z.pods.OnNode(ctx, node); err != nil {
			return Decision{}, fmt.Errorf("authorize: pods on node %s: %w", node, err)
		}
	case checkTokenPod:
		name := a.BoundObject.Name
		p, err := z.pods.Get(ctx, a.Namespace, name)
		if err != nil {
			return Decision{}, fmt.Errorf("authorize: get pod %s/%s: %w", a.Namespace, name, err)
		}
		if p != nil {
			pods = []*corev1.Pod{p}
		}
	}
	return finish(u, a, check, pods), nil
}

// noNext is the reason a request is denied when no authorizer follows.
const noNext = "no authorizer beyond the node and system:masters rules is configured"

// chained returns Next's decision on what the Authorizer's own rules
// leave open.
func (z *Authorizer) chained(ctx context.Context, u User, a Attributes) (Decision, error) {
	if z.next == nil {
		return Decision{Reason: noNext}, nil
	}
	d, err := z.next.Authorize(ctx, u, a)
	d.NoOpinion = false
	return d, err
}

// Decide decides on u's request a given pods, without I/O. pods are those
// the decision involves: the pod a node's pod status update or delete
// names (none when it does not exist), the pods bound to the node for a
// node's get of a secret, config map, service account or persistent volume
// claim, or the pod a node's token request binds its token to; other
// requests ignore them. Decide checks each pod's namespace,
// name and spec.nodeName itself, so extra pods do no harm.
//
// A node may:
//   - get, list and watch nodes, pods, services, endpoints and
//     endpointslices (discovery.k8s.io), and their status;
//   - get a secret, config map, service account or persistent volume
//     claim that a pod bound to it references (volumes, projected sources,
//     env and envFrom, image pull secrets, the service account), but never
//     list or watch them;
//   - create, update and patch its own Node and its status;
//   - update and patch the status of pods bound to it, and delete them;
//   - create a token (serviceaccounts/token) for the service account of a
//     pod bound to it, bound to that pod (boundObjectRef a v1 Pod with the
//     pod's UID), as upstream's node authorizer and NodeRestriction allow;
//   - get, create, update, patch and delete its Lease (its own name, in
//     kube-node-lease, coordination.k8s.io);
//   - create, patch and update events (core and events.k8s.io);
//   - read discovery, health, version and OpenAPI, as any user may.
//
// system:masters may do anything (see Authorizer). A node's request on those resources that these rules do
// not allow is denied; on others, and for other users, Decide has no
// opinion (Decision.NoOpinion) beyond health, version, discovery and
// OpenAPI: RBAC decides.
func Decide(u User, a Attributes, pods []*corev1.Pod) Decision {
	d, check := decide(u, a)
	if check == checkNone {
		return d
	}
	return finish(u, a, check, pods)
}

// check is what a decision still needs once the attributes are known.
type check int

const (
	checkNone       check = iota // decided by user and attributes alone
	checkBoundPod                // the named pod must be bound to the node
	checkReferenced              // a pod bound to the node must reference the object
	checkTokenPod                // the token's pod must be bound to the node and run as the service account
)

var (
	allow     = Decision{Allowed: true}
	noOpinion = Decision{NoOpinion: true}
)

// decide returns the decision on u's request a, or the check that decides
// it (the Decision is then meaningless).
func decide(u User, a Attributes) (Decision, check) {
	if !a.ResourceRequest && a.Verb == "get" && publicInfoPath(a.Path) {
		return allow, checkNone
	}
	if u.IsAnonymous() {
		// Whatever its groups say: only RBAC may grant it more.
		return noOpinion, checkNone
	}
	if u.InGroup(MastersGroup) {
		return allow, checkNone
	}
	if !a.ResourceRequest {
		if a.Verb == "get" && publicPath(a.Path) {
			return allow, checkNone
		}
		return noOpinion, checkNone
	}
	if node, ok := u.NodeName(); ok {
		return decideNode(node, a)
	}
	return noOpinion, checkNone
}

// publicInfoPath reports whether anyone, authenticated or not, may get
// path: what load balancers and probes ask, as upstream's
// system:public-info-viewer role has it.
func publicInfoPath(path string) bool {
	switch path {
	case "/healthz", "/livez", "/readyz", "/version", "/version/":
		return true
	}
	return false
}

// publicPath reports whether any authenticated user may get path: API
// discovery, health, version and OpenAPI (upstream's system:discovery and
// system:public-info-viewer roles). /metrics and /debug/pprof are not.
func publicPath(path string) bool {
	switch path {
	case "/api", "/apis", "/healthz", "/livez", "/readyz", "/version", "/version/", "/openapi/v2", "/openapi/v3":
		return true
	}
	for _, prefix := range []string{"/api/", "/apis/", "/healthz/", "/livez/", "/readyz/", "/openapi/v3/"} {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

type groupResource struct{ group, resource string }

var (
	grNodes           = groupResource{"", "nodes"}
	grPods            = groupResource{"", "pods"}
	grServiceAccounts = groupResource{"", "serviceaccounts"}
	grLeases          = groupResource{"coordination.k8s.io", "leases"}

	// nodeReadable are what a node may get, list and watch.
	nodeReadable = map[groupResource]bool{
		grNodes:                                true,
		grPods:                                 true,
		{"", "services"}:                       true,
		{"", "endpoints"}:                      true,
		{"discovery.k8s.io", "endpointslices"}: true,
	}
	// referenced are what a node may get when a pod bound to it refers to
	// them.
	referenced = map[groupResource]bool{
		{"", "secrets"}:                true,
		{"", "configmaps"}:             true,
		{"", "serviceaccounts"}:        true,
		{"", "persistentvolumeclaims"}: true,
	}
	nodeEvents = map[groupResource]bool{
		{"", "events"}:              true,
		{"events.k8s.io", "events"}: true,
	}
)

// NodeLeaseNamespace holds the nodes' heartbeat Leases.
const NodeLeaseNamespace = "kube-node-lease"

// decideNode applies the node rules to a resource request.
func decideNode(node string, a Attributes) (Decision, check) {
	gr := groupResource{a.APIGroup, a.Resource}
	read := a.Verb == "get" || a.Verb == "list" || a.Verb == "watch"
	if nodeReadable[gr] && read && (a.Subresource == "" || a.Subresource == "status") {
		return allow, checkNone
	}
	switch {
	case gr == grServiceAccounts && a.Subresource == "token" && a.Verb == "create":
		ref := a.BoundObject
		switch {
		case a.Namespace == "" || a.Name == "":
		case ref == nil || ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name == "":
			return Decision{Reason: "node requested token not bound to a pod"}, checkNone
		case ref.UID == "":
			return Decision{Reason: "node requested token with a pod binding without a uid"}, checkNone
		default:
			return Decision{}, checkTokenPod
		}
	case gr == grNodes:
		write := a.Verb == "update" || a.Verb == "patch" || a.Verb == "create" && a.Subresource == ""
		if write && (a.Subresource == "" || a.Subresource == "status") {
			if a.Name != node {
				return Decision{Reason: fmt.Sprintf("node %q is not allowed to modify node %q", node, a.Name)}, checkNone
			}
			return allow, checkNone
		}
	case gr == grPods:
		statusWrite := (a.Verb == "update" || a.Verb == "patch") && a.Subresource == "status"
		del := a.Verb == "delete" && a.Subresource == ""
		if (statusWrite || del) && a.Namespace != "" && a.Name != "" {
			return Decision{}, checkBoundPod
		}
	case referenced[gr]:
		switch {
		case !read:
			return Decision{Reason: "can only read resources of this type"}, checkNone
		case a.Subresource != "":
			return Decision{Reason: "cannot read subresource"}, checkNone
		case a.Verb != "get":
			return Decision{Reason: "can only get individual resources of this type"}, checkNone
		case a.Namespace == "":
			return Decision{Reason: "can only read namespaced object of this type"}, checkNone
		}
		return Decision{}, checkReferenced
	case gr == grLeases:
		leaseVerb := a.Verb == "get" || a.Verb == "create" || a.Verb == "update" || a.Verb == "patch" || a.Verb == "delete"
		switch {
		case !leaseVerb || a.Subresource != "":
		case a.Namespace != NodeLeaseNamespace:
			return Decision{Reason: fmt.Sprintf("can only access leases in the %q system namespace", NodeLeaseNamespace)}, checkNone
		case a.Name != node:
			return Decision{Reason: "can only access node lease with the same name as the requesting node"}, checkNone
		default:
			return allow, checkNone
		}
	case nodeEvents[gr]:
		if (a.Verb == "create" || a.Verb == "patch" || a.Verb == "update") && a.Subresource == "" {
			return allow, checkNone
		}
	}
	return noOpinion, checkNone
}

// finish decides a node's request that needs pods.
func finish(u User, a Attributes, c check, pods []*corev1.Pod) Decision {
	node, _ := u.NodeName()
	switch c {
	case checkBoundPod:
		exists := false
		for _, p := range pods {
			if p.Namespace == a.Namespace && p.Name == a.Name {
				if p.Spec.NodeName == node {
					return allow
				}
				exists = true
			}
		}
		if !exists {
			return Decision{NotFound: true}
		}
		if a.Verb == "delete" {
			return Decision{Reason: fmt.Sprintf("node '%s' can only delete pods with spec.nodeName set to itself", node)}
		}
		return Decision{Reason: fmt.Sprintf("node '%s' can only update pod status for pods with spec.nodeName set to itself", node)}
	case checkReferenced:
		for _, p := range pods {
			if p.Namespace == a.Namespace && p.Spec.NodeName == node && references(p, a.Resource, a.Name) {
				return allow
			}
		}
		return Decision{Reason: fmt.Sprintf("no relationship found between node '%s' and this object", node)}
	case checkTokenPod:
		ref := a.BoundObject
		for _, p := range pods {
			if p.Namespace != a.Namespace || p.Name != ref.Name {
				continue
			}
			switch {
			case p.Spec.NodeName != node:
				return Decision{Reason: "node requested token bound to a pod scheduled on a different node"}
			case string(p.UID) != ref.UID:
				return Decision{Reason: fmt.Sprintf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID)}
			case podServiceAccount(p) != a.Name:
				return Decision{Reason: fmt.Sprintf("no relationship found between node '%s' and this object", node)}
			}
			return allow
		}
		return Decision{Reason: fmt.Sprintf("no relationship found between node '%s' and this object", node)}
	}
	return Decision{}
}

// podServiceAccount is the service account pod runs as.
func podServiceAccount(p *corev1.Pod) string {
	found := ""
	podrefs.Visit(p, func(r, n string) bool {
		if r == podrefs.ServiceAccounts {
			found = n
			return false
		}
		return true
	})
	return found
}

// NeedsBoundObject reports whether deciding on u's request a needs the
// object a TokenRequest binds its token to, which is in the request body:
// a node's create of serviceaccounts/token is allowed only for a pod bound
// to it. The caller then decodes the body as the API server will and sets
// a.BoundObject; left nil, the create is denied.
func NeedsBoundObject(u User, a Attributes) bool {
	if a.Verb != "create" || !a.ResourceRequest || a.APIGroup != "" || a.Resource != "serviceaccounts" || a.Subresource != "token" || u.InGroup(MastersGroup) {
		return false
	}
	_, ok := u.NodeName()
	return ok
}

// NeedsCreateName reports whether deciding on u's request a needs the name
// of the object created, which is in the request body: a node's creates of
// Nodes and Leases are allowed only for its own name. The caller then
// decodes the body as the API server will and sets a.Name; left empty, the
// create is denied.
func NeedsCreateName(u User, a Attributes) bool {
	if a.Verb != "create" || !a.ResourceRequest || a.Subresource != "" || a.Name != "" || u.InGroup(MastersGroup) {
		return false
	}
	if _, ok := u.NodeName(); !ok {
		return false
	}
	gr := groupResource{a.APIGroup, a.Resource}
	return gr == grNodes || gr == grLeases
}

// ForbiddenMessage returns what follows `<resource> "<name>" is forbidden: `
// in upstream's answer to a denied request, such as
//
//	User "system:node:edge-1" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'edge-1' and this object
func ForbiddenMessage(u User, a Attributes, reason string) string {
	var msg string
	switch {
	case !a.ResourceRequest:
		msg = fmt.Sprintf("User %q cannot %s path %q", u.Name, a.Verb, a.Path)
	default:
		resource := a.Resource
		if a.Subresource != "" {
			resource += "/" + a.Subresource
		}
		if a.Namespace != "" {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", u.Name, a.Verb, resource, a.APIGroup, a.Namespace)
		} else {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", u.Name, a.Verb, resource, a.APIGroup)
		}
	}
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}
