// Package replication is the ReplicationController controller, as
// upstream's replication manager in kube-controller-manager: it keeps
// spec.replicas pods of each ReplicationController, adopts and releases
// pods by selector, and reports status. Like upstream, it is the
// ReplicaSet controller (package replicaset) run on ReplicationControllers
// seen as ReplicaSets: this package only converts between the two.
package replication

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/replicaset"
)

// Kind is the group, version and kind that the pods' controller
// references and the controller's events name.
var Kind = corev1.SchemeGroupVersion.WithKind("ReplicationController")

// Component is the controller's name in its events, as upstream's.
const Component = "replication-controller"

// Controller is the ReplicationController controller: the ReplicaSet
// controller's shell over ReplicationControllers.
type Controller struct {
	*replicaset.Controller
}

// New returns the ReplicationController controller of c. It registers the
// ReplicationController and Pod informers and starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ctl, err := replicaset.NewFor(c, Owners(c))
	if err != nil {
		return nil, err
	}
	return &Controller{ctl}, nil
}

// Owners returns the ReplicationControllers of c's informers and client,
// seen as ReplicaSets.
func Owners(c controllers.Context) replicaset.Owners {
	return replicaset.Owners{
		Kind:      Kind,
		Component: Component,
		Informer:  c.Informers.Core().V1().ReplicationControllers().Informer(),
		Convert: func(obj any) (*appsv1.ReplicaSet, bool) {
			rc, ok := obj.(*corev1.ReplicationController)
			if !ok {
				return nil, false
			}
			return ToReplicaSet(rc), true
		},
		Get: func(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error) {
			rc, err := c.Client.CoreV1().ReplicationControllers(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return ToReplicaSet(rc), nil
		},
		UpdateStatus: func(ctx context.Context, rs *appsv1.ReplicaSet) error {
			rc := FromReplicaSet(rs)
			_, err := c.Client.CoreV1().ReplicationControllers(rc.Namespace).UpdateStatus(ctx, rc, metav1.UpdateOptions{})
			return err
		},
	}
}

// ToReplicaSet returns rc seen as a ReplicaSet: the same metadata, its
// selector map as matchLabels (nil for none), its template, and its
// status. The result shares no memory with rc.
func ToReplicaSet(rc *corev1.ReplicationController) *appsv1.ReplicaSet {
	rc = rc.DeepCopy()
	rs := &appsv1.ReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "ReplicaSet"},
		ObjectMeta: rc.ObjectMeta,
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        rc.Spec.Replicas,
			MinReadySeconds: rc.Spec.MinReadySeconds,
		},
		Status: appsv1.ReplicaSetStatus{
			Replicas:             rc.Status.Replicas,
			FullyLabeledReplicas: rc.Status.FullyLabeledReplicas,
			ReadyReplicas:        rc.Status.ReadyReplicas,
			AvailableReplicas:    rc.Status.AvailableReplicas,
			ObservedGeneration:   rc.Status.ObservedGeneration,
		},
	}
	if rc.Spec.Selector != nil {
		rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: rc.Spec.Selector}
	}
	if rc.Spec.Template != nil {
		rs.Spec.Template = *rc.Spec.Template
	}
	for _, c := range rc.Status.Conditions {
		rs.Status.Conditions = append(rs.Status.Conditions, appsv1.ReplicaSetCondition{
			Type:               appsv1.ReplicaSetConditionType(c.Type),
			Status:             c.Status,
			LastTransitionTime: c.LastTransitionTime,
			Reason:             c.Reason,
			Message:            c.Message,
		})
	}
	return rs
}

// FromReplicaSet returns the ReplicationController that rs, made by
// ToReplicaSet, is the view of, with rs's spec and status. A selector's
// matchExpressions, which ToReplicaSet never makes, are dropped. The
// result shares no memory with rs.
func FromReplicaSet(rs *appsv1.ReplicaSet) *corev1.ReplicationController {
	rs = rs.DeepCopy()
	rc := &corev1.ReplicationController{
		TypeMeta:   metav1.TypeMeta{APIVersion: corev1.SchemeGroupVersion.String(), Kind: Kind.Kind},
		ObjectMeta: rs.ObjectMeta,
		Spec: corev1.ReplicationControllerSpec{
			Replicas:        rs.Spec.Replicas,
			MinReadySeconds: rs.Spec.MinReadySeconds,
			Template:        &rs.Spec.Template,
		},
		Status: corev1.ReplicationControllerStatus{
			Replicas:             rs.Status.Replicas,
			FullyLabeledReplicas: rs.Status.FullyLabeledReplicas,
			ReadyReplicas:        rs.Status.ReadyReplicas,
			AvailableReplicas:    rs.Status.AvailableReplicas,
			ObservedGeneration:   rs.Status.ObservedGeneration,
		},
	}
	if rs.Spec.Selector != nil {
		rc.Spec.Selector = rs.Spec.Selector.MatchLabels
	}
	for _, c := range rs.Status.Conditions {
		rc.Status.Conditions = append(rc.Status.Conditions, corev1.ReplicationControllerCondition{
			Type:               corev1.ReplicationControllerConditionType(c.Type),
			Status:             c.Status,
			LastTransitionTime: c.LastTransitionTime,
			Reason:             c.Reason,
			Message:            c.Message,
		})
	}
	return rc
}
