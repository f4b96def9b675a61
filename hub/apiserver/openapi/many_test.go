package openapi

import (
	"testing"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kproto "k8s.io/kube-openapi/pkg/util/proto"
)

// TestManyKinds builds the documents for a wide set of upstream kinds, the
// kind of set the hub serves, and parses the v2 result as kubectl does.
func TestManyKinds(t *testing.T) {
	t.Parallel()
	k := func(g, v, kind, plural string, ns bool, obj, list any, subs ...string) Kind {
		return Kind{GVK: schema.GroupVersionKind{Group: g, Version: v, Kind: kind}, Plural: plural, Namespaced: ns, Object: obj, List: list, Subresources: subs}
	}
	kinds := []Kind{
		k("", "v1", "Pod", "pods", true, &corev1.Pod{}, &corev1.PodList{}, "status"),
		k("", "v1", "Node", "nodes", false, &corev1.Node{}, &corev1.NodeList{}, "status"),
		k("", "v1", "Namespace", "namespaces", false, &corev1.Namespace{}, &corev1.NamespaceList{}, "status"),
		k("", "v1", "ConfigMap", "configmaps", true, &corev1.ConfigMap{}, &corev1.ConfigMapList{}),
		k("", "v1", "Secret", "secrets", true, &corev1.Secret{}, &corev1.SecretList{}),
		k("", "v1", "Service", "services", true, &corev1.Service{}, &corev1.ServiceList{}, "status"),
		k("", "v1", "Endpoints", "endpoints", true, &corev1.Endpoints{}, &corev1.EndpointsList{}),
		k("", "v1", "Event", "events", true, &corev1.Event{}, &corev1.EventList{}),
		k("", "v1", "ServiceAccount", "serviceaccounts", true, &corev1.ServiceAccount{}, &corev1.ServiceAccountList{}),
		k("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, &corev1.PersistentVolumeClaim{}, &corev1.PersistentVolumeClaimList{}, "status"),
		k("", "v1", "ResourceQuota", "resourcequotas", true, &corev1.ResourceQuota{}, &corev1.ResourceQuotaList{}, "status"),
		k("", "v1", "LimitRange", "limitranges", true, &corev1.LimitRange{}, &corev1.LimitRangeList{}),
		k("apps", "v1", "Deployment", "deployments", true, &appsv1.Deployment{}, &appsv1.DeploymentList{}, "status", "scale"),
		k("apps", "v1", "ReplicaSet", "replicasets", true, &appsv1.ReplicaSet{}, &appsv1.ReplicaSetList{}, "status", "scale"),
		k("apps", "v1", "StatefulSet", "statefulsets", true, &appsv1.StatefulSet{}, &appsv1.StatefulSetList{}, "status", "scale"),
		k("apps", "v1", "DaemonSet", "daemonsets", true, &appsv1.DaemonSet{}, &appsv1.DaemonSetList{}, "status"),
		k("apps", "v1", "ControllerRevision", "controllerrevisions", true, &appsv1.ControllerRevision{}, &appsv1.ControllerRevisionList{}),
		k("batch", "v1", "Job", "jobs", true, &batchv1.Job{}, &batchv1.JobList{}, "status"),
		k("batch", "v1", "CronJob", "cronjobs", true, &batchv1.CronJob{}, &batchv1.CronJobList{}, "status"),
		k("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", true, &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{}),
		k("coordination.k8s.io", "v1", "Lease", "leases", true, &coordinationv1.Lease{}, &coordinationv1.LeaseList{}),
		k("rbac.authorization.k8s.io", "v1", "Role", "roles", true, &rbacv1.Role{}, &rbacv1.RoleList{}),
		k("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false, &rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRoleBindingList{}),
		k("events.k8s.io", "v1", "Event", "events", true, &eventsv1.Event{}, &eventsv1.EventList{}),
		k("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", true, &networkingv1.NetworkPolicy{}, &networkingv1.NetworkPolicyList{}),
		k("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, &policyv1.PodDisruptionBudget{}, &policyv1.PodDisruptionBudgetList{}, "status"),
		k("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", true, &autoscalingv2.HorizontalPodAutoscaler{}, &autoscalingv2.HorizontalPodAutoscalerList{}, "status"),
		k("storage.k8s.io", "v1", "StorageClass", "storageclasses", false, &storagev1.StorageClass{}, &storagev1.StorageClassList{}),
	}
	start := time.Now()
	s, err := New(kinds)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Logf("New(%d kinds) took %v; v2 %d bytes JSON, %d gzipped; %d v3 documents", len(kinds), time.Since(start), len(s.v2.json), len(s.v2.jsonGzip), len(s.v3))
	pb, _, err := s.v2.protobuf()
	if err != nil {
		t.Fatal(err)
	}
	var doc openapi_v2.Document
	if err := proto.Unmarshal(pb, &doc); err != nil {
		t.Fatal(err)
	}
	if _, err := kproto.NewOpenAPIData(&doc); err != nil {
		t.Errorf("proto.NewOpenAPIData = %v", err)
	}
	if len(s.v3) != 11 {
		t.Errorf("%d v3 documents, want one for each of the 11 group versions", len(s.v3))
	}
	// Converting every v3 document is slow under -race and adds little:
	// they share one generator. Two with group names of several labels.
	for _, key := range []string{"apis/rbac.authorization.k8s.io/v1", "apis/discovery.k8s.io/v1"} {
		if d := s.v3[key]; d == nil {
			t.Errorf("no v3 document %s", key)
		} else if _, _, err := d.protobuf(); err != nil {
			t.Errorf("v3 %s protobuf: %v", key, err)
		}
	}
}
