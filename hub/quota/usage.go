package quota

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ErrNotCounted is returned by Usage for a resource whose objects no
// quota counts here.
var ErrNotCounted = errors.New("resource not counted by quota")

// StorageClassSuffix joins a storage class's name to the resource it
// limits of claims of that class, as in
// gold.storageclass.storage.k8s.io/requests.storage.
const StorageClassSuffix = ".storageclass.storage.k8s.io/"

// Group resources counted here.
var (
	Pods                   = schema.GroupResource{Resource: "pods"}
	Services               = schema.GroupResource{Resource: "services"}
	Secrets                = schema.GroupResource{Resource: "secrets"}
	ConfigMaps             = schema.GroupResource{Resource: "configmaps"}
	ReplicationControllers = schema.GroupResource{Resource: "replicationcontrollers"}
	ResourceQuotas         = schema.GroupResource{Resource: "resourcequotas"}
	Claims                 = schema.GroupResource{Resource: "persistentvolumeclaims"}
	ReplicaSets            = schema.GroupResource{Group: appsv1.GroupName, Resource: "replicasets"}
	Deployments            = schema.GroupResource{Group: appsv1.GroupName, Resource: "deployments"}
	StatefulSets           = schema.GroupResource{Group: appsv1.GroupName, Resource: "statefulsets"}
	DaemonSets             = schema.GroupResource{Group: appsv1.GroupName, Resource: "daemonsets"}
	Jobs                   = schema.GroupResource{Group: batchv1.GroupName, Resource: "jobs"}
	CronJobs               = schema.GroupResource{Group: batchv1.GroupName, Resource: "cronjobs"}
)

// evaluator is what quota knows of the objects of one resource.
type evaluator struct {
	// legacy is the resource's count without the count/ prefix (pods,
	// services, ...), or "" when it has none.
	legacy corev1.ResourceName
	// usage adds to list what obj uses beyond its counts; nil for
	// resources counted only. It may set counts to zero (a finished
	// pod no longer counts in pods).
	usage func(obj runtime.Object, now time.Time, list corev1.ResourceList) error
	// matches reports the quota resources beyond its counts that usage
	// sets; nil for none.
	matches func(corev1.ResourceName) bool
	// scope reports whether obj is in a quota's scope; nil for resources
	// that no scoped quota counts, as upstream's generic evaluators.
	scope func(s corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error)
}

// evaluators are the resources counted here, as upstream's registry of
// evaluators for the resources Outpost serves that it names.
var evaluators = map[schema.GroupResource]evaluator{
	Pods:                   {legacy: corev1.ResourcePods, usage: podUsage, matches: podMatches, scope: podScope},
	Services:               {legacy: corev1.ResourceServices, usage: serviceUsage, matches: serviceMatches},
	Secrets:                {legacy: corev1.ResourceSecrets},
	ConfigMaps:             {legacy: corev1.ResourceConfigMaps},
	ReplicationControllers: {legacy: corev1.ResourceReplicationControllers},
	ResourceQuotas:         {legacy: corev1.ResourceQuotas},
	Claims:                 {legacy: corev1.ResourcePersistentVolumeClaims, usage: claimUsage, matches: claimMatches},
	ReplicaSets:            {},
	Deployments:            {},
	StatefulSets:           {},
	DaemonSets:             {},
	Jobs:                   {},
	CronJobs:               {},
}

// Resources returns the group resources whose objects quotas count here,
// sorted; the caller owns the slice.
func Resources() []schema.GroupResource {
	out := make([]schema.GroupResource, 0, len(evaluators))
	for gr := range evaluators {
		out = append(out, gr)
	}
	slices.SortFunc(out, func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// Counted reports whether quotas count objects of gr here.
func Counted(gr schema.GroupResource) bool {
	_, ok := evaluators[gr]
	return ok
}

// ObjectCountName is the quota resource that counts the objects of gr:
// count/pods, count/replicasets.apps.
func ObjectCountName(gr schema.GroupResource) corev1.ResourceName {
	return corev1.ResourceName("count/" + gr.String())
}

// Matching returns the names among names that objects of gr are counted
// in, in the order of names; none for a resource not counted here.
func Matching(gr schema.GroupResource, names []corev1.ResourceName) []corev1.ResourceName {
	e, ok := evaluators[gr]
	if !ok {
		return nil
	}
	var out []corev1.ResourceName
	for _, n := range names {
		if n == ObjectCountName(gr) || e.legacy != "" && n == e.legacy || e.matches != nil && e.matches(n) {
			out = append(out, n)
		}
	}
	return out
}

// Usage returns what obj, an object of gr, uses of every quota resource
// it is counted in, at now (which decides whether a pod being deleted
// still counts). The caller owns the list. It returns an error wrapping
// ErrNotCounted for a resource not counted here, and one for an object
// not of gr's Go type.
func Usage(gr schema.GroupResource, obj runtime.Object, now time.Time) (corev1.ResourceList, error) {
	e, ok := evaluators[gr]
	if !ok {
		return nil, fmt.Errorf("%s: %w", gr, ErrNotCounted)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	list := corev1.ResourceList{ObjectCountName(gr): one}
	if e.legacy != "" {
		list[e.legacy] = one.DeepCopy()
	}
	if e.usage != nil {
		if err := e.usage(obj, now, list); err != nil {
			return nil, err
		}
	}
	return list, nil
}

// Used returns the usage of the resources names, of those objs (all of
// gr, in one namespace) that scopes select, each name starting at zero:
// what a quota of those names and scopes has used of them, as upstream's
// controller computes it. Names that objects of gr are not counted in
// are left out.
func Used(gr schema.GroupResource, names []corev1.ResourceName, scopes []corev1.ScopedResourceSelectorRequirement, objs []runtime.Object, now time.Time) (corev1.ResourceList, error) {
	names = Matching(gr, names)
	used := make(corev1.ResourceList, len(names))
	for _, n := range names {
		used[n] = *resource.NewQuantity(0, resource.DecimalSI)
	}
	if len(names) == 0 {
		return used, nil
	}
	for _, obj := range objs {
		in, err := InScopes(gr, obj, scopes)
		if err != nil {
			return nil, err
		}
		if !in {
			continue
		}
		u, err := Usage(gr, obj, now)
		if err != nil {
			return nil, err
		}
		used = Add(used, Mask(u, names))
	}
	return used, nil
}

// typed returns obj as a T, or an error naming what it is.
func typed[T runtime.Object](obj runtime.Object) (T, error) {
	t, ok := obj.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("quota: unexpected object %T, want %T", obj, zero)
	}
	return t, nil
}

// serviceUsage counts a service's load balancer and node ports as
// upstream: a NodePort service uses one node port per port, a
// LoadBalancer one too unless it asks for none to be allocated (then
// those its ports name).
func serviceUsage(obj runtime.Object, _ time.Time, list corev1.ResourceList) error {
	svc, err := typed[*corev1.Service](obj)
	if err != nil {
		return err
	}
	ports := int64(len(svc.Spec.Ports))
	var lbs, nodePorts int64
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		nodePorts = ports
	case corev1.ServiceTypeLoadBalancer:
		lbs, nodePorts = 1, ports
		if a := svc.Spec.AllocateLoadBalancerNodePorts; a != nil && !*a {
			nodePorts = 0
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					nodePorts++
				}
			}
		}
	}
	list[corev1.ResourceServicesLoadBalancers] = *resource.NewQuantity(lbs, resource.DecimalSI)
	list[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(nodePorts, resource.DecimalSI)
	return nil
}

// serviceMatches reports the quota resources of services beyond counts.
func serviceMatches(n corev1.ResourceName) bool {
	return n == corev1.ResourceServicesLoadBalancers || n == corev1.ResourceServicesNodePorts
}

// claimUsage charges a claim's storage, rounded up to whole bytes, the
// larger of what it requests and what was allocated, to requests.storage
// and, with its count, to its storage class's resources.
func claimUsage(obj runtime.Object, _ time.Time, list corev1.ResourceList) error {
	pvc, err := typed[*corev1.PersistentVolumeClaim](obj)
	if err != nil {
		return err
	}
	class := claimClass(pvc)
	if class != "" {
		list[corev1.ResourceName(class+StorageClassSuffix+string(corev1.ResourcePersistentVolumeClaims))] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	storage, ok := claimStorage(pvc)
	if !ok {
		return nil
	}
	list[corev1.ResourceRequestsStorage] = storage
	if class != "" {
		list[corev1.ResourceName(class+StorageClassSuffix+string(corev1.ResourceRequestsStorage))] = storage.DeepCopy()
	}
	return nil
}

// claimClass is the storage class of pvc: its field, or the beta
// annotation that preceded it.
func claimClass(pvc *corev1.PersistentVolumeClaim) string {
	if c, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return c
	}
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

// claimStorage is the storage pvc is charged for, if any.
func claimStorage(pvc *corev1.PersistentVolumeClaim) (resource.Quantity, bool) {
	q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if a, aok := pvc.Status.AllocatedResources[corev1.ResourceStorage]; aok && (!ok || a.Cmp(q) > 0) {
		q, ok = a, true
	}
	if !ok {
		return resource.Quantity{}, false
	}
	q = q.DeepCopy()
	q.RoundUp(0)
	return q, true
}

// claimMatches reports the quota resources of claims beyond counts:
// requests.storage and the per-class ones.
func claimMatches(n corev1.ResourceName) bool {
	if n == corev1.ResourceRequestsStorage {
		return true
	}
	_, r, ok := strings.Cut(string(n), StorageClassSuffix)
	return ok && (r == string(corev1.ResourcePersistentVolumeClaims) || r == string(corev1.ResourceRequestsStorage))
}
