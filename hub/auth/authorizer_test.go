package auth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	admin = User{Name: "outpost-admin", Groups: []string{"system:masters"}}
	nodeA = User{Name: "system:node:edge-a", Groups: []string{"system:nodes"}}
	bob   = User{Name: "bob", Groups: []string{"developers"}}
	// Half a node: the name without the group, or the group without the
	// name, is no node at all.
	nameOnly  = User{Name: "system:node:edge-a"}
	groupOnly = User{Name: "edge-a", Groups: []string{"system:nodes"}}
)

func pod(ns, name, node string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// req parses "METHOD /path?query" into attributes.
func req(s string) Attributes {
	method, rawURL, _ := strings.Cut(s, " ")
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	return ParseAttributes(method, u.Path, u.Query())
}

// named sets the name a create carries in its body.
func named(a Attributes, name string) Attributes {
	a.Name = name
	return a
}

func TestDecide(t *testing.T) {
	// Pods: a's pods run on edge-a, b's on edge-b.
	podA := pod("default", "web-a", "edge-a", func(p *corev1.Pod) {
		p.Spec.ServiceAccountName = "web"
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls-a"}}},
			{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf-a"}}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-secret"}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-conf"}}},
			}}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-a"}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}},
			{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-secret"}}}},
		}
		p.Spec.InitContainers = []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init-env"}}},
		}}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "DB", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
			{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "mode"}, Key: "mode"}}},
		}
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debug-conf"}}}}}}}
	})
	podB := pod("default", "web-b", "edge-b", func(p *corev1.Pod) {
		p.Spec.ServiceAccountName = "web-b"
		p.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls-b"}}}}
	})
	otherNS := pod("other", "web-a", "edge-a", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "other-ns"}}}}
	})
	pending := pod("default", "pending", "", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "pending"}}}}
	})
	nodePods := []*corev1.Pod{podA, otherNS}
	// What a careless lookup might return: pods of other nodes too.
	everyPod := []*corev1.Pod{podA, podB, otherNS, pending}

	for _, tc := range []struct {
		user User
		req  Attributes
		pods []*corev1.Pod
		// allowed, not found, or the reason of the denial ("-" for an
		// empty one).
		allowed  bool
		notFound bool
		reason   string
	}{
		// system:masters may do anything, even what the API does not serve.
		{user: admin, req: req("DELETE /api/v1/namespaces/kube-system/secrets"), allowed: true},
		{user: admin, req: req("GET /metrics"), allowed: true},
		{user: admin, req: req("POST /debug/pprof/profile"), allowed: true},
		{user: admin, req: req("OPTIONS /api/v1/pods"), allowed: true},

		// Any authenticated user reads discovery, health, version, OpenAPI.
		{user: bob, req: req("GET /api"), allowed: true},
		{user: bob, req: req("GET /api/v1"), allowed: true},
		{user: bob, req: req("GET /apis/apps/v1"), allowed: true},
		{user: bob, req: req("GET /healthz"), allowed: true},
		{user: bob, req: req("HEAD /readyz"), allowed: true},
		{user: bob, req: req("GET /livez"), allowed: true},
		{user: bob, req: req("GET /version"), allowed: true},
		{user: bob, req: req("GET /openapi/v2"), allowed: true},
		{user: bob, req: req("GET /openapi/v3/apis/apps/v1"), allowed: true},
		{user: nodeA, req: req("GET /openapi/v3"), allowed: true},
		{user: bob, req: req("POST /healthz"), reason: rbacDecides},
		{user: bob, req: req("GET /metrics"), reason: rbacDecides},
		{user: nodeA, req: req("GET /metrics"), reason: rbacDecides},
		{user: nodeA, req: req("GET /debug/pprof/"), reason: rbacDecides},
		{user: bob, req: req("GET /"), reason: rbacDecides},
		{user: bob, req: req("GET /openapi/v2x"), reason: rbacDecides},
		// Without credentials: health and version, as upstream's
		// system:public-info-viewer, and nothing else.
		{user: Anonymous, req: req("GET /healthz"), allowed: true},
		{user: Anonymous, req: req("GET /livez"), allowed: true},
		{user: Anonymous, req: req("GET /readyz?verbose"), allowed: true},
		{user: Anonymous, req: req("HEAD /readyz"), allowed: true},
		{user: Anonymous, req: req("GET /version"), allowed: true},
		{user: Anonymous, req: req("GET /version/"), allowed: true},
		{user: Anonymous, req: req("POST /healthz"), reason: rbacDecides},
		{user: Anonymous, req: req("GET /healthz/ping"), reason: rbacDecides},
		{user: Anonymous, req: req("GET /api"), reason: rbacDecides},
		{user: Anonymous, req: req("GET /apis/apps/v1"), reason: rbacDecides},
		{user: Anonymous, req: req("GET /openapi/v2"), reason: rbacDecides},
		{user: Anonymous, req: req("GET /metrics"), reason: rbacDecides},
		{user: Anonymous, req: req("GET /api/v1/namespaces/default/pods"), reason: rbacDecides},
		{user: Anonymous, req: req("GET /"), reason: rbacDecides},
		// Anonymous is no more, whatever groups it claims.
		{user: User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup, MastersGroup}}, req: req("GET /api/v1/pods"), reason: rbacDecides},
		// ... and nothing else: there is no RBAC.
		{user: bob, req: req("GET /api/v1/pods"), reason: rbacDecides},
		{user: bob, req: req("GET /api/v1/nodes/edge-a"), reason: rbacDecides},
		{user: nameOnly, req: req("GET /api/v1/nodes/edge-a"), reason: rbacDecides},
		{user: groupOnly, req: req("GET /api/v1/nodes/edge-a"), reason: rbacDecides},
		{user: User{Name: "system:node:", Groups: []string{"system:nodes"}}, req: req("GET /api/v1/nodes"), reason: rbacDecides},

		// Nodes read nodes, pods, services, endpoints, endpointslices.
		{user: nodeA, req: req("GET /api/v1/nodes/edge-a"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/nodes/edge-b"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/nodes?watch=1"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/nodes/edge-a/status"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/pods?fieldSelector=spec.nodeName%3Dedge-a"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/pods/web-b"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/services"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/endpoints?watch=true"), allowed: true},
		{user: nodeA, req: req("GET /apis/discovery.k8s.io/v1/endpointslices"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/pods/web-a/log"), reason: rbacDecides},
		{user: nodeA, req: req("GET /apis/apps/v1/deployments"), reason: rbacDecides},
		{user: nodeA, req: req("GET /api/v1/namespaces"), reason: rbacDecides},
		{user: nodeA, req: req("GET /apis/other.example.com/v1/endpointslices"), reason: rbacDecides},

		// Nodes get what their pods refer to, and nothing else.
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/tls-a"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/registry"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/proj-secret"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/csi-secret"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/init-env"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/db"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/other/secrets/other-ns"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/configmaps/conf-a"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/configmaps/proj-conf"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/configmaps/mode"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/configmaps/debug-conf"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/serviceaccounts/web"), pods: nodePods, allowed: true},
		// A pod that names no service account runs as "default".
		{user: nodeA, req: req("GET /api/v1/namespaces/other/serviceaccounts/default"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/serviceaccounts/default"), pods: nodePods, reason: "no relationship found between node 'edge-a' and this object"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/persistentvolumeclaims/data-a"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/persistentvolumeclaims/web-a-scratch"), pods: nodePods, allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/tls-a"), pods: everyPod, allowed: true},
		// a name of one kind does not open another kind
		{user: nodeA, req: req("GET /api/v1/namespaces/default/configmaps/tls-a"), pods: nodePods, reason: "no relationship found between node 'edge-a' and this object"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/conf-a"), pods: nodePods, reason: "no relationship found between node 'edge-a' and this object"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/serviceaccounts/registry"), pods: nodePods, reason: "no relationship found between node 'edge-a' and this object"},
		// another node's pods, another namespace, an unbound pod
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/tls-b"), pods: everyPod, reason: "no relationship found between node 'edge-a' and this object"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/serviceaccounts/web-b"), pods: everyPod, reason: "no relationship found between node 'edge-a' and this object"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/other-ns"), pods: everyPod, reason: "no relationship found between node 'edge-a' and this object"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/pending"), pods: everyPod, reason: "no relationship found between node 'edge-a' and this object"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/tls-a"), reason: "no relationship found between node 'edge-a' and this object"},
		// only single gets
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets"), pods: nodePods, reason: "can only get individual resources of this type"},
		{user: nodeA, req: req("GET /api/v1/secrets?watch=true"), pods: nodePods, reason: "can only get individual resources of this type"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3Dtls-a"), pods: nodePods, reason: "can only get individual resources of this type"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/secrets/tls-a?watch=true"), pods: nodePods, reason: "can only get individual resources of this type"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/configmaps"), pods: nodePods, reason: "can only get individual resources of this type"},
		{user: nodeA, req: req("GET /api/v1/namespaces//secrets/tls-a"), pods: nodePods, reason: "can only read namespaced object of this type"},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/serviceaccounts/web/token"), pods: nodePods, reason: "cannot read subresource"},
		{user: nodeA, req: req("PUT /api/v1/namespaces/default/secrets/tls-a"), pods: nodePods, reason: "can only read resources of this type"},
		{user: nodeA, req: req("DELETE /api/v1/namespaces/default/configmaps/conf-a"), pods: nodePods, reason: "can only read resources of this type"},
		{user: nodeA, req: req("POST /api/v1/namespaces/default/secrets"), pods: nodePods, reason: "can only read resources of this type"},

		// Its own Node, and no other.
		{user: nodeA, req: named(req("POST /api/v1/nodes"), "edge-a"), allowed: true},
		{user: nodeA, req: req("PUT /api/v1/nodes/edge-a"), allowed: true},
		{user: nodeA, req: req("PATCH /api/v1/nodes/edge-a"), allowed: true},
		{user: nodeA, req: req("PUT /api/v1/nodes/edge-a/status"), allowed: true},
		{user: nodeA, req: req("PATCH /api/v1/nodes/edge-a/status"), allowed: true},
		{user: nodeA, req: named(req("POST /api/v1/nodes"), "edge-b"), reason: `node "edge-a" is not allowed to modify node "edge-b"`},
		{user: nodeA, req: req("POST /api/v1/nodes"), reason: `node "edge-a" is not allowed to modify node ""`},
		{user: nodeA, req: req("PATCH /api/v1/nodes/edge-b"), reason: `node "edge-a" is not allowed to modify node "edge-b"`},
		{user: nodeA, req: req("PUT /api/v1/nodes/edge-b/status"), reason: `node "edge-a" is not allowed to modify node "edge-b"`},
		{user: nodeA, req: req("DELETE /api/v1/nodes/edge-a"), reason: rbacDecides},
		{user: nodeA, req: req("DELETE /api/v1/nodes"), reason: rbacDecides},
		{user: nodeA, req: req("PUT /api/v1/nodes/edge-a/proxy"), reason: rbacDecides},

		// Status and deletion of the pods bound to it.
		{user: nodeA, req: req("PUT /api/v1/namespaces/default/pods/web-a/status"), pods: []*corev1.Pod{podA}, allowed: true},
		{user: nodeA, req: req("PATCH /api/v1/namespaces/default/pods/web-a/status"), pods: []*corev1.Pod{podA}, allowed: true},
		{user: nodeA, req: req("DELETE /api/v1/namespaces/default/pods/web-a"), pods: []*corev1.Pod{podA}, allowed: true},
		{user: nodeA, req: req("PUT /api/v1/namespaces/default/pods/web-b/status"), pods: []*corev1.Pod{podB}, reason: "node 'edge-a' can only update pod status for pods with spec.nodeName set to itself"},
		{user: nodeA, req: req("PATCH /api/v1/namespaces/default/pods/web-b/status"), pods: everyPod, reason: "node 'edge-a' can only update pod status for pods with spec.nodeName set to itself"},
		{user: nodeA, req: req("PUT /api/v1/namespaces/default/pods/pending/status"), pods: []*corev1.Pod{pending}, reason: "node 'edge-a' can only update pod status for pods with spec.nodeName set to itself"},
		// A pod that does not exist is not found, as upstream's
		// NodeRestriction answers a kubelet confirming a deletion twice.
		{user: nodeA, req: req("PUT /api/v1/namespaces/default/pods/gone/status"), notFound: true},
		{user: nodeA, req: req("DELETE /api/v1/namespaces/default/pods/gone"), pods: everyPod, notFound: true},
		{user: nodeA, req: req("DELETE /api/v1/namespaces/default/pods/web-b"), pods: []*corev1.Pod{podB}, reason: "node 'edge-a' can only delete pods with spec.nodeName set to itself"},
		// a pod of the same name in another namespace is not that pod
		{user: nodeA, req: req("DELETE /api/v1/namespaces/kube-system/pods/web-a"), pods: []*corev1.Pod{podA}, notFound: true},
		{user: nodeA, req: req("PUT /api/v1/namespaces/default/pods/web-a"), pods: []*corev1.Pod{podA}, reason: rbacDecides},
		{user: nodeA, req: req("POST /api/v1/namespaces/default/pods"), reason: rbacDecides},
		{user: nodeA, req: req("DELETE /api/v1/namespaces/default/pods"), reason: rbacDecides},
		{user: nodeA, req: req("POST /api/v1/namespaces/default/pods/web-a/binding"), pods: []*corev1.Pod{podA}, reason: rbacDecides},
		{user: nodeA, req: req("POST /api/v1/namespaces/default/pods/web-a/eviction"), pods: []*corev1.Pod{podA}, reason: rbacDecides},
		{user: nodeA, req: req("PUT /api/v1/pods/web-a/status"), pods: []*corev1.Pod{podA}, reason: rbacDecides},

		// Its Lease.
		{user: nodeA, req: req("GET /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-a"), allowed: true},
		{user: nodeA, req: named(req("POST /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"), "edge-a"), allowed: true},
		{user: nodeA, req: req("PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-a"), allowed: true},
		{user: nodeA, req: req("PATCH /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-a"), allowed: true},
		{user: nodeA, req: req("DELETE /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-a"), allowed: true},
		{user: nodeA, req: named(req("POST /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"), "edge-b"), reason: "can only access node lease with the same name as the requesting node"},
		{user: nodeA, req: req("PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-b"), reason: "can only access node lease with the same name as the requesting node"},
		{user: nodeA, req: req("PUT /apis/coordination.k8s.io/v1/namespaces/default/leases/edge-a"), reason: `can only access leases in the "kube-node-lease" system namespace`},
		{user: nodeA, req: req("GET /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"), reason: rbacDecides},
		{user: nodeA, req: req("DELETE /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"), reason: rbacDecides},

		// Events.
		{user: nodeA, req: req("POST /api/v1/namespaces/default/events"), allowed: true},
		{user: nodeA, req: req("PATCH /api/v1/namespaces/default/events/web-a.1"), allowed: true},
		{user: nodeA, req: req("PUT /api/v1/namespaces/default/events/web-a.1"), allowed: true},
		{user: nodeA, req: req("POST /apis/events.k8s.io/v1/namespaces/default/events"), allowed: true},
		{user: nodeA, req: req("GET /api/v1/namespaces/default/events"), reason: rbacDecides},
		{user: nodeA, req: req("DELETE /api/v1/namespaces/default/events/web-a.1"), reason: rbacDecides},

		// Nothing else.
		{user: nodeA, req: req("OPTIONS /api/v1/pods"), reason: rbacDecides},
		{user: nodeA, req: req("POST /api/v1/namespaces/default/services"), reason: rbacDecides},
		{user: nodeA, req: req("DELETE /api/v1/namespaces/default/endpoints/web"), reason: rbacDecides},
		{user: nodeA, req: req("POST /api/v1/namespaces"), reason: rbacDecides},
	} {
		name := fmt.Sprintf("%s %s %s/%s/%s %q/%q", tc.user.Name, tc.req.Verb, tc.req.APIGroup, tc.req.Resource, tc.req.Subresource, tc.req.Namespace, tc.req.Name)
		if !tc.req.ResourceRequest {
			name = fmt.Sprintf("%s %s %s", tc.user.Name, tc.req.Verb, tc.req.Path)
		}
		want := Decision{Allowed: tc.allowed, NotFound: tc.notFound, Reason: tc.reason}
		switch want.Reason {
		case "-":
			want.Reason = ""
		case rbacDecides:
			want = Decision{NoOpinion: true}
		}
		if got := Decide(tc.user, tc.req, tc.pods); got != want {
			t.Errorf("Decide(%s) = %+v, want %+v", name, got, want)
		}
	}
}

// fakePods serves pods from a slice and counts its calls.
type fakePods struct {
	pods        []*corev1.Pod
	err         error
	gets, lists int
}

func (f *fakePods) Get(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.gets++
	for _, p := range f.pods {
		if p.Namespace == ns && p.Name == name {
			return p, f.err
		}
	}
	return nil, f.err
}

func (f *fakePods) OnNode(_ context.Context, node string) ([]*corev1.Pod, error) {
	f.lists++
	var out []*corev1.Pod
	for _, p := range f.pods {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, f.err
}

var _ Pods = (*fakePods)(nil)

// TestAuthorize checks that Authorize looks up what Decide needs, only
// when it needs it.
func TestAuthorize(t *testing.T) {
	podA := pod("default", "web-a", "edge-a", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls-a"}}}}
	})
	podB := pod("default", "web-b", "edge-b", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls-b"}}}}
	})
	for _, tc := range []struct {
		user        User
		req         string
		allowed     bool
		gets, lists int
	}{
		{admin, "GET /api/v1/namespaces/default/secrets/tls-b", true, 0, 0},
		{admin, "PUT /api/v1/namespaces/default/pods/web-b/status", true, 0, 0},
		{nodeA, "GET /api/v1/pods", true, 0, 0},
		{nodeA, "GET /api/v1/namespaces/default/secrets", false, 0, 0},
		{nodeA, "GET /api/v1/namespaces/default/secrets/tls-a", true, 0, 1},
		{nodeA, "GET /api/v1/namespaces/default/secrets/tls-b", false, 0, 1},
		{nodeA, "PUT /api/v1/namespaces/default/pods/web-a/status", true, 1, 0},
		{nodeA, "PUT /api/v1/namespaces/default/pods/web-b/status", false, 1, 0},
		{nodeA, "DELETE /api/v1/namespaces/default/pods/web-a", true, 1, 0},
		{nodeA, "DELETE /api/v1/namespaces/default/pods/missing", false, 1, 0},
		{bob, "GET /api/v1/namespaces/default/secrets/tls-a", false, 0, 0},
	} {
		pods := &fakePods{pods: []*corev1.Pod{podA, podB}}
		d, err := NewAuthorizer(pods, nil).Authorize(context.Background(), tc.user, req(tc.req))
		if err != nil || d.Allowed != tc.allowed || pods.gets != tc.gets || pods.lists != tc.lists {
			t.Errorf("Authorize(%s, %s) = %+v, %v with %d gets, %d lists; want allowed %v with %d gets, %d lists",
				tc.user.Name, tc.req, d, err, pods.gets, pods.lists, tc.allowed, tc.gets, tc.lists)
		}
	}

	boom := errors.New("store down")
	for _, r := range []string{"GET /api/v1/namespaces/default/secrets/tls-a", "DELETE /api/v1/namespaces/default/pods/web-a"} {
		pods := &fakePods{pods: []*corev1.Pod{podA}, err: boom}
		if d, err := NewAuthorizer(pods, nil).Authorize(context.Background(), nodeA, req(r)); !errors.Is(err, boom) || d.Allowed {
			t.Errorf("Authorize(%s) with a failing lookup = %+v, %v; want denied and %v", r, d, err, boom)
		}
	}
}

func TestNeedsCreateName(t *testing.T) {
	for _, tc := range []struct {
		user User
		req  string
		want bool
	}{
		{nodeA, "POST /api/v1/nodes", true},
		{nodeA, "POST /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", true},
		{nodeA, "POST /apis/coordination.k8s.io/v1/namespaces/default/leases", true},
		{nodeA, "POST /api/v1/namespaces/default/events", false},
		{nodeA, "POST /api/v1/namespaces/default/pods", false},
		{nodeA, "PUT /api/v1/nodes/edge-a", false},
		{nodeA, "POST /api/v1/nodes/edge-a/status", false},
		{admin, "POST /api/v1/nodes", false},
		{bob, "POST /api/v1/nodes", false},
	} {
		if got := NeedsCreateName(tc.user, req(tc.req)); got != tc.want {
			t.Errorf("NeedsCreateName(%s, %s) = %v, want %v", tc.user.Name, tc.req, got, tc.want)
		}
	}
}

func TestForbiddenMessage(t *testing.T) {
	for _, tc := range []struct {
		user   User
		req    string
		reason string
		want   string
	}{
		{nodeA, "GET /api/v1/namespaces/default/secrets/db", "no relationship found between node 'edge-a' and this object",
			`User "system:node:edge-a" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'edge-a' and this object`},
		{nodeA, "GET /api/v1/secrets", "",
			`User "system:node:edge-a" cannot list resource "secrets" in API group "" at the cluster scope`},
		{nodeA, "PUT /api/v1/namespaces/default/pods/web/status", "r",
			`User "system:node:edge-a" cannot update resource "pods/status" in API group "" in the namespace "default": r`},
		{bob, "POST /apis/apps/v1/namespaces/default/deployments", "",
			`User "bob" cannot create resource "deployments" in API group "apps" in the namespace "default"`},
		{bob, "GET /metrics", "",
			`User "bob" cannot get path "/metrics"`},
	} {
		if got := ForbiddenMessage(tc.user, req(tc.req), tc.reason); got != tc.want {
			t.Errorf("ForbiddenMessage(%s, %s) = %s, want %s", tc.user.Name, tc.req, got, tc.want)
		}
	}
}
