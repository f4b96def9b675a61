package core

import (
	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultPodTemplate applies to the pod template of a workload (a
// Deployment's, a Job's, ...) the defaults upstream applies when it
// decodes the workload: those of the pod spec and its containers and
// volumes. The defaults upstream applies to pods only are left out, as
// upstream does: requests from limits, enableServiceLinks, host ports
// under hostNetwork and priority. It modifies t.
func DefaultPodTemplate(t *corev1.PodTemplateSpec) {
	defaultPodSpec(&t.Spec)
}

// ValidatePodTemplate checks the pod template of a workload found at
// fldPath (such as spec.template), as upstream's ValidatePodTemplateSpec
// does: labels, annotations and the pod spec, which may leave hostPort
// unset under hostNetwork and may not have ephemeral containers. What the
// workload requires beyond that (a restartPolicy of Always, labels its
// selector matches) is the workload's to check.
func ValidatePodTemplate(t *corev1.PodTemplateSpec, fldPath *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabels(t.Labels, fldPath.Child("labels"))
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(t.Annotations, fldPath.Child("annotations"))...)
	errs = append(errs, validatePodAnnotations(t.Annotations, &t.Spec, fldPath.Child("annotations"))...)
	errs = append(errs, validatePodSpec(&t.Spec, nil, fldPath.Child("spec"), false)...)
	if len(t.Spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(fldPath.Child("spec", "ephemeralContainers"), "ephemeral containers not allowed in pod template"))
	}
	return errs
}

// ValidateTolerations checks tolerations found at fldPath as a pod's
// are checked; a RuntimeClass's scheduling carries them too.
func ValidateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	return validateTolerations(tolerations, fldPath)
}

// ValidateOverhead checks a fixed resource overhead found at fldPath (a
// pod's spec.overhead, a RuntimeClass's overhead.podFixed's parent) as
// upstream does: as a container's limits, so its errors' paths read
// fldPath.limits[name], not the field's own name.
func ValidateOverhead(overhead corev1.ResourceList, fldPath *field.Path) field.ErrorList {
	return validateResourceRequirements(&corev1.ResourceRequirements{Limits: overhead}, validateContainerResourceName, nil, fldPath)
}
