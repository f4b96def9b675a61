package hubd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/store"
)

// PodDialer connects to a port of a pod on an edge node, through that
// node's sync session (the hub cannot dial nodes); *streams.Server is one.
type PodDialer interface {
	DialPod(ctx context.Context, pod *corev1.Pod, port int32) (net.Conn, error)
}

// serviceDialer reaches the pods behind a Service for its admission
// webhooks: the Service's port, then a ready endpoint of its
// EndpointSlices (in random order, so that the webhook's load spreads),
// then that pod through its node. It reads the store, not informers, so
// that the hub keeps no copy of every Service and slice for the rare
// service webhook.
type serviceDialer struct {
	st   store.Reader
	pods PodDialer
}

var (
	servicesPrefix = apiserver.KeyPrefix(schema.GroupResource{Resource: "services"})
	slicesPrefix   = apiserver.KeyPrefix(schema.GroupResource{Group: discoveryv1.GroupName, Resource: "endpointslices"})
)

// DialService connects to port of Service namespace/name.
func (d serviceDialer) DialService(ctx context.Context, namespace, name string, port int32) (net.Conn, error) {
	kv, err := d.st.Get(ctx, servicesPrefix+namespace+"/"+name, 0)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("service %s/%s not found", namespace, name))
	}
	if err != nil {
		return nil, err
	}
	var svc corev1.Service
	if err := apiserver.DecodeStored(kv.Value, &svc); err != nil {
		return nil, err
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("service %s/%s has no port %d", namespace, name, port)
	}
	targets, err := d.readyTargets(ctx, namespace, name, sp)
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("service %s/%s has no ready endpoints for port %d", namespace, name, port)
	}
	rand.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
	var errs []error
	for _, t := range targets {
		pod, err := storePods{d.st}.Get(ctx, namespace, t.pod)
		if err != nil || pod == nil || pod.Spec.NodeName == "" {
			continue
		}
		conn, err := d.pods.DialPod(ctx, pod, t.port)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("service %s/%s: no endpoint reached: %w", namespace, name, errors.Join(errs...))
}

// target is a ready pod behind a Service and the port it serves sp on.
type target struct {
	pod  string
	port int32
}

// readyTargets returns the ready pods of the Service's EndpointSlices
// that serve sp (the slice port of the same name).
func (d serviceDialer) readyTargets(ctx context.Context, namespace, name string, sp *corev1.ServicePort) ([]target, error) {
	owned := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
	var out []target
	opts := store.ListOptions{Limit: 100}
	for {
		page, err := d.st.List(ctx, slicesPrefix+namespace+"/", opts)
		if err != nil {
			return nil, err
		}
		for _, kv := range page.KVs {
			var s discoveryv1.EndpointSlice
			if err := apiserver.DecodeStored(kv.Value, &s); err != nil || !owned.Matches(labels.Set(s.Labels)) {
				continue
			}
			var port int32
			for _, p := range s.Ports {
				if p.Port != nil && (p.Name == nil && sp.Name == "" || p.Name != nil && *p.Name == sp.Name) {
					port = *p.Port
				}
			}
			if port == 0 {
				continue
			}
			for _, e := range s.Endpoints {
				ready := e.Conditions.Ready == nil || *e.Conditions.Ready
				if ready && e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
					out = append(out, target{pod: e.TargetRef.Name, port: port})
				}
			}
		}
		if !page.More {
			return out, nil
		}
		opts.Revision, opts.Continue = page.Revision, page.Continue
	}
}
