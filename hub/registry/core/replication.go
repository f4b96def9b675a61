package core

// Pod templates and replication controllers. The hub serves
// replication controllers with their status and scale subresources but
// runs no controller for them yet: nothing creates their pods, and their
// status changes only when a client writes it.

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

var (
	templatePath = field.NewPath("template")
	statusPath   = field.NewPath("status")
)

// Column definitions of the pod template of a workload, worded as
// upstream's printers.
var (
	containersColumn = metav1.TableColumnDefinition{Name: "Containers", Type: "string", Description: "Names of each container in the template."}
	imagesColumn     = metav1.TableColumnDefinition{Name: "Images", Type: "string", Description: "Images referenced by each container in the template."}
)

// containerCells returns the names and the images of containers, each
// joined by commas, for the CONTAINERS and IMAGES columns.
func containerCells(containers []corev1.Container) (names, images string) {
	n := make([]string, len(containers))
	im := make([]string, len(containers))
	for i, c := range containers {
		n[i], im[i] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(im, ",")
}

func podTemplateResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "PodTemplate",
		Plural:       "podtemplates",
		Singular:     "podtemplate",
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.PodTemplate{} },
		NewList:      func() runtime.Object { return &corev1.PodTemplateList{} },
		AddToScheme:  corev1.AddToScheme,
		// Upstream counts changes of the template in generation.
		Generation: true,
		Rules: &typed.Rules[*corev1.PodTemplate]{
			Now:         now,
			Defaults:    func(pt *corev1.PodTemplate) { DefaultPodTemplate(&pt.Template) },
			Check:       validatePodTemplateObject,
			CheckUpdate: validatePodTemplateObjectUpdate,
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				containersColumn,
				imagesColumn,
				{Name: "Pod Labels", Type: "string", Description: "The labels for the pod template."},
			},
			TableRow: func(pt *corev1.PodTemplate, _ time.Time) []interface{} {
				names, images := containerCells(pt.Template.Spec.Containers)
				return []interface{}{pt.Name, names, images, labels.FormatLabels(pt.Template.Labels)}
			},
		},
	}
}

func validatePodTemplateObject(pt *corev1.PodTemplate) field.ErrorList {
	errs := validateObjectMeta(&pt.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, ValidatePodTemplate(&pt.Template, templatePath)...)
}

func validatePodTemplateObjectUpdate(pt, old *corev1.PodTemplate) field.ErrorList {
	errs := validateObjectMetaUpdate(&pt.ObjectMeta, &old.ObjectMeta)
	return append(errs, ValidatePodTemplate(&pt.Template, templatePath)...)
}

func replicationControllerResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "ReplicationController",
		Plural:       "replicationcontrollers",
		Singular:     "replicationcontroller",
		ShortNames:   []string{"rc"},
		Categories:   []string{"all"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.ReplicationController{} },
		NewList:      func() runtime.Object { return &corev1.ReplicationControllerList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Generation:   true,
		Scale:        replicationControllerScale,
		Rules: &typed.Rules[*corev1.ReplicationController]{
			Now:           now,
			Defaults:      defaultReplicationController,
			PrepareCreate: func(rc *corev1.ReplicationController) { rc.Status = corev1.ReplicationControllerStatus{} },
			PrepareUpdate: func(rc, old *corev1.ReplicationController) { rc.Status = old.Status },
			Check:         validateReplicationController,
			CheckUpdate:   validateReplicationControllerUpdate,
			CheckStatus:   validateReplicationControllerStatus,
			FieldSet: func(rc *corev1.ReplicationController) fields.Set {
				return fields.Set{"status.replicas": strconv.Itoa(int(rc.Status.Replicas))}
			},
			TableColumns: replicationControllerColumns(),
			TableRow:     replicationControllerRow,
		},
	}
}

// defaultReplicationController applies upstream's v1 defaults: the
// selector and, when the controller has none, its labels come from the
// template's labels; one replica; the template's pod defaults.
func defaultReplicationController(rc *corev1.ReplicationController) {
	if t := rc.Spec.Template; t != nil {
		if t.Labels != nil {
			if len(rc.Spec.Selector) == 0 {
				rc.Spec.Selector = maps.Clone(t.Labels)
			}
			if len(rc.Labels) == 0 {
				rc.Labels = maps.Clone(t.Labels)
			}
		}
		DefaultPodTemplate(t)
	}
	if rc.Spec.Replicas == nil {
		rc.Spec.Replicas = ptrTo(int32(1))
	}
}

func validateReplicationController(rc *corev1.ReplicationController) field.ErrorList {
	errs := validateObjectMeta(&rc.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	return append(errs, validateReplicationControllerSpec(&rc.Spec, specPath)...)
}

// validateReplicationControllerUpdate checks an update as a create:
// upstream makes no field of a controller's spec immutable.
func validateReplicationControllerUpdate(rc, old *corev1.ReplicationController) field.ErrorList {
	errs := validateObjectMetaUpdate(&rc.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateReplicationControllerSpec(&rc.Spec, specPath)...)
}

func validateReplicationControllerSpec(s *corev1.ReplicationControllerSpec, fld *field.Path) field.ErrorList {
	errs := validateNonnegative(int64(s.MinReadySeconds), fld.Child("minReadySeconds"))
	if labels.Set(s.Selector).AsSelector().Empty() {
		errs = append(errs, field.Required(fld.Child("selector"), ""))
	}
	replicas := int32(1)
	if s.Replicas != nil {
		replicas = *s.Replicas
	}
	errs = append(errs, validateNonnegative(int64(replicas), fld.Child("replicas"))...)
	return append(errs, validateReplicationControllerTemplate(s.Template, s.Selector, replicas, fld.Child("template"))...)
}

// validateReplicationControllerTemplate checks the pod template t of a
// controller with selector and replicas, found at fld, as upstream's
// ValidatePodTemplateSpecForRC: present, selected, a valid template whose
// pods run forever, and with read-only GCE disks when replicated.
func validateReplicationControllerTemplate(t *corev1.PodTemplateSpec, selector map[string]string, replicas int32, fld *field.Path) field.ErrorList {
	if t == nil {
		return field.ErrorList{field.Required(fld, "")}
	}
	var errs field.ErrorList
	if sel := labels.Set(selector).AsSelector(); !sel.Empty() && !sel.Matches(labels.Set(t.Labels)) {
		errs = append(errs, field.Invalid(fld.Child("metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
	}
	errs = append(errs, ValidatePodTemplate(t, fld)...)
	if replicas > 1 {
		for i, v := range t.Spec.Volumes {
			if v.GCEPersistentDisk != nil && !v.GCEPersistentDisk.ReadOnly {
				errs = append(errs, field.Invalid(fld.Child("spec", "volumes").Index(i).Child("gcePersistentDisk", "readOnly"), false,
					"must be true for replicated pods > 1; GCE PD can only be mounted on multiple machines if it is read-only"))
			}
		}
	}
	if t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(fld.Child("spec", "restartPolicy"), t.Spec.RestartPolicy, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if t.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Invalid(fld.Child("spec", "activeDeadlineSeconds"), *t.Spec.ActiveDeadlineSeconds, "must not be specified"))
	}
	return errs
}

func validateReplicationControllerStatus(rc, old *corev1.ReplicationController) field.ErrorList {
	errs := validateObjectMetaUpdate(&rc.ObjectMeta, &old.ObjectMeta)
	s := &rc.Status
	errs = append(errs, ValidateReplicaCounts(statusPath, s.Replicas, s.ReadyReplicas, s.AvailableReplicas,
		ReplicaCount{"fullyLabeledReplicas", s.FullyLabeledReplicas})...)
	return append(errs, validateNonnegative(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
}

// ReplicaCount is one counter of a workload's status, named as its field
// (fullyLabeledReplicas, updatedReplicas, ...).
type ReplicaCount struct {
	Name string
	N    int32
}

// ValidateReplicaCounts checks the counters of a workload's status at
// fld, as upstream checks those of replication controllers and of the
// apps workloads: none negative, none of bounded, ready or available
// above replicas, and available not above ready.
func ValidateReplicaCounts(fld *field.Path, replicas, ready, available int32, bounded ...ReplicaCount) field.ErrorList {
	readyC := ReplicaCount{"readyReplicas", ready}
	availableC := ReplicaCount{"availableReplicas", available}
	var errs field.ErrorList
	for _, c := range slices.Concat([]ReplicaCount{{"replicas", replicas}, readyC, availableC}, bounded) {
		errs = append(errs, validateNonnegative(int64(c.N), fld.Child(c.Name))...)
	}
	const msg = "cannot be greater than status.replicas"
	for _, c := range slices.Concat(bounded, []ReplicaCount{readyC, availableC}) {
		if c.N > replicas {
			errs = append(errs, field.Invalid(fld.Child(c.Name), c.N, msg))
		}
	}
	if available > ready {
		errs = append(errs, field.Invalid(fld.Child("availableReplicas"), available, "cannot be greater than readyReplicas"))
	}
	return errs
}

func replicationControllerColumns() []metav1.TableColumnDefinition {
	spec := corev1.ReplicationControllerSpec{}.SwaggerDoc()
	status := corev1.ReplicationControllerStatus{}.SwaggerDoc()
	wide := func(c metav1.TableColumnDefinition) metav1.TableColumnDefinition {
		c.Priority = 1
		return c
	}
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Desired", Type: "integer", Description: spec["replicas"]},
		{Name: "Current", Type: "integer", Description: status["replicas"]},
		{Name: "Ready", Type: "integer", Description: status["readyReplicas"]},
		ageColumn,
		wide(containersColumn),
		wide(imagesColumn),
		{Name: "Selector", Type: "string", Priority: 1, Description: spec["selector"]},
	}
}

func replicationControllerRow(rc *corev1.ReplicationController, now time.Time) []interface{} {
	var names, images string
	if t := rc.Spec.Template; t != nil {
		names, images = containerCells(t.Spec.Containers)
	}
	return []interface{}{
		rc.Name,
		int64(rcReplicas(rc)),
		int64(rc.Status.Replicas),
		int64(rc.Status.ReadyReplicas),
		age(rc.CreationTimestamp, now),
		names,
		images,
		labels.FormatLabels(rc.Spec.Selector),
	}
}

// rcReplicas is the controller's spec.replicas, 1 when unset as the
// default makes it.
func rcReplicas(rc *corev1.ReplicationController) int32 {
	if rc.Spec.Replicas == nil {
		return 1
	}
	return *rc.Spec.Replicas
}

var replicationControllerScale = &apiserver.ScaleRules{
	Get: func(obj runtime.Object) (int32, int32, string) {
		rc := obj.(*corev1.ReplicationController)
		return rcReplicas(rc), rc.Status.Replicas, labels.SelectorFromSet(rc.Spec.Selector).String()
	},
	Set: func(obj runtime.Object, n int32) { obj.(*corev1.ReplicationController).Spec.Replicas = ptrTo(n) },
}
