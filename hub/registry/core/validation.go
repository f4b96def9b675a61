package core

import (
	"fmt"
	"net/netip"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validation helpers shared by the core resources. Messages and field
// paths follow pkg/apis/core/validation upstream, so that kubectl users
// see the errors they know.

const (
	isNegativeErrorMsg     = apimachineryvalidation.IsNegativeErrorMsg
	isNotIntegerErrorMsg   = "must be an integer"
	isInvalidQuotaResource = "must be a standard resource for quota"
	fieldImmutableErrorMsg = apimachineryvalidation.FieldImmutableErrorMsg
	fileModeErrorMsg       = "must be a number between 0 and 0777 (octal), both inclusive"
)

var metadataPath = field.NewPath("metadata")

// validateObjectMeta checks the metadata of a new object: name by nameFn,
// namespace present exactly when namespaced, labels, annotations, owner
// references and finalizers (which must be fully qualified unless they are
// one of the standard ones).
func validateObjectMeta(meta *metav1.ObjectMeta, namespaced bool, nameFn apimachineryvalidation.ValidateNameFunc) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(meta, namespaced, nameFn, metadataPath)
	for i, f := range meta.Finalizers {
		errs = append(errs, validateKubeFinalizerName(f, metadataPath.Child("finalizers").Index(i))...)
	}
	return errs
}

// validateObjectMetaUpdate checks what an update changes in metadata
// (name, namespace, uid and creationTimestamp are immutable).
func validateObjectMetaUpdate(meta, old *metav1.ObjectMeta) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(meta, old, metadataPath)
	for i, f := range meta.Finalizers {
		errs = append(errs, validateKubeFinalizerName(f, metadataPath.Child("finalizers").Index(i))...)
	}
	return errs
}

var standardFinalizers = map[string]bool{
	string(corev1.FinalizerKubernetes): true,
	metav1.FinalizerOrphanDependents:   true,
	metav1.FinalizerDeleteDependents:   true,
}

func validateKubeFinalizerName(name string, fldPath *field.Path) field.ErrorList {
	if !strings.Contains(name, "/") && !standardFinalizers[name] {
		return field.ErrorList{field.Invalid(fldPath, name, "name is neither a standard finalizer name nor is it fully qualified")}
	}
	return nil
}

func validateFinalizerName(name string, fldPath *field.Path) field.ErrorList {
	errs := apimachineryvalidation.ValidateFinalizerName(name, fldPath)
	return append(errs, validateKubeFinalizerName(name, fldPath)...)
}

func validateDNS1123Label(value string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(value) {
		errs = append(errs, field.Invalid(fldPath, value, msg))
	}
	return errs
}

func validateDNS1123Subdomain(value string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(value) {
		errs = append(errs, field.Invalid(fldPath, value, msg))
	}
	return errs
}

func validateQualifiedName(value string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range content.IsQualifiedName(value) {
		errs = append(errs, field.Invalid(fldPath, value, msg))
	}
	return errs
}

// validateName checks value with a ValidateNameFunc, reporting each
// problem at fldPath.
func validateName(value string, nameFn apimachineryvalidation.ValidateNameFunc, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range nameFn(value, false) {
		errs = append(errs, field.Invalid(fldPath, value, msg))
	}
	return errs
}

func validateNonnegative(value int64, fldPath *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateNonnegativeField(value, fldPath)
}

func validateImmutable(newVal, oldVal interface{}, fldPath *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateImmutableField(newVal, oldVal, fldPath)
}

func validatePortNum(port int32, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortNum(int(port)) {
		errs = append(errs, field.Invalid(fldPath, port, msg))
	}
	return errs
}

// validateNonSpecialIP rejects addresses that make no sense as endpoints
// or external IPs: unspecified, loopback and link-local ones.
func validateNonSpecialIP(ip string, fldPath *field.Path) field.ErrorList {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath, ip, "must be a valid IP address")}
	}
	var errs field.ErrorList
	if addr.IsUnspecified() {
		errs = append(errs, field.Invalid(fldPath, ip, fmt.Sprintf("may not be unspecified (%v)", ip)))
	}
	if addr.IsLoopback() {
		errs = append(errs, field.Invalid(fldPath, ip, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if addr.IsLinkLocalUnicast() {
		errs = append(errs, field.Invalid(fldPath, ip, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if addr.IsLinkLocalMulticast() {
		errs = append(errs, field.Invalid(fldPath, ip, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return errs
}

// isIPv6 reports whether s is a valid IPv6 address (not IPv4-mapped).
func isIPv6(s string) bool {
	addr, err := netip.ParseAddr(s)
	return err == nil && addr.Is6() && !addr.Is4In6()
}

// isDualStack reports whether ips holds exactly one IPv4 and one IPv6
// address.
func isDualStack(ips []string) bool {
	if len(ips) != 2 {
		return false
	}
	return isIPv6(ips[0]) != isIPv6(ips[1])
}

// validateLocalDescendingPath checks that p is relative and has no ".."
// element.
func validateLocalDescendingPath(p string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if path.IsAbs(p) {
		errs = append(errs, field.Invalid(fldPath, p, "must be a relative path"))
	}
	return append(errs, validatePathNoBacksteps(p, fldPath)...)
}

func validatePathNoBacksteps(p string, fldPath *field.Path) field.ErrorList {
	for _, item := range strings.Split(filepath.ToSlash(p), "/") {
		if item == ".." {
			return field.ErrorList{field.Invalid(fldPath, p, "must not contain '..'")}
		}
	}
	return nil
}

// validateLocalNonReservedPath is validateLocalDescendingPath that also
// refuses names starting with "..", which the kubelet uses for itself.
func validateLocalNonReservedPath(p string, fldPath *field.Path) field.ErrorList {
	errs := validateLocalDescendingPath(p, fldPath)
	if strings.HasPrefix(p, "..") && !strings.HasPrefix(p, "../") {
		errs = append(errs, field.Invalid(fldPath, p, "must not start with '..'"))
	}
	return errs
}

// Resource names, as pkg/apis/core/helper classifies them.

const hugePagesPrefix = "hugepages-"

var standardContainerResources = map[corev1.ResourceName]bool{
	corev1.ResourceCPU:              true,
	corev1.ResourceMemory:           true,
	corev1.ResourceEphemeralStorage: true,
}

var standardResources = map[corev1.ResourceName]bool{
	corev1.ResourceCPU:                      true,
	corev1.ResourceMemory:                   true,
	corev1.ResourceEphemeralStorage:         true,
	corev1.ResourceRequestsCPU:              true,
	corev1.ResourceRequestsMemory:           true,
	corev1.ResourceRequestsEphemeralStorage: true,
	corev1.ResourceLimitsCPU:                true,
	corev1.ResourceLimitsMemory:             true,
	corev1.ResourceLimitsEphemeralStorage:   true,
	corev1.ResourcePods:                     true,
	corev1.ResourceQuotas:                   true,
	corev1.ResourceServices:                 true,
	corev1.ResourceReplicationControllers:   true,
	corev1.ResourceSecrets:                  true,
	corev1.ResourceConfigMaps:               true,
	corev1.ResourcePersistentVolumeClaims:   true,
	corev1.ResourceStorage:                  true,
	corev1.ResourceRequestsStorage:          true,
	corev1.ResourceServicesNodePorts:        true,
	corev1.ResourceServicesLoadBalancers:    true,
}

var standardQuotaResources = map[corev1.ResourceName]bool{
	corev1.ResourceCPU:                      true,
	corev1.ResourceMemory:                   true,
	corev1.ResourceEphemeralStorage:         true,
	corev1.ResourceRequestsCPU:              true,
	corev1.ResourceRequestsMemory:           true,
	corev1.ResourceRequestsStorage:          true,
	corev1.ResourceRequestsEphemeralStorage: true,
	corev1.ResourceLimitsCPU:                true,
	corev1.ResourceLimitsMemory:             true,
	corev1.ResourceLimitsEphemeralStorage:   true,
	corev1.ResourcePods:                     true,
	corev1.ResourceQuotas:                   true,
	corev1.ResourceServices:                 true,
	corev1.ResourceReplicationControllers:   true,
	corev1.ResourceSecrets:                  true,
	corev1.ResourcePersistentVolumeClaims:   true,
	corev1.ResourceConfigMaps:               true,
	corev1.ResourceServicesNodePorts:        true,
	corev1.ResourceServicesLoadBalancers:    true,
}

// integerResources are counted in whole units.
var integerResources = map[corev1.ResourceName]bool{
	corev1.ResourcePods:                   true,
	corev1.ResourceQuotas:                 true,
	corev1.ResourceServices:               true,
	corev1.ResourceReplicationControllers: true,
	corev1.ResourceSecrets:                true,
	corev1.ResourceConfigMaps:             true,
	corev1.ResourcePersistentVolumeClaims: true,
	corev1.ResourceServicesNodePorts:      true,
	corev1.ResourceServicesLoadBalancers:  true,
}

func isHugePageResource(name corev1.ResourceName) bool {
	return strings.HasPrefix(string(name), hugePagesPrefix)
}

func isQuotaHugePageResource(name corev1.ResourceName) bool {
	return strings.HasPrefix(string(name), hugePagesPrefix) || strings.HasPrefix(string(name), "requests."+hugePagesPrefix)
}

// isNativeResource reports whether name is unprefixed or in the
// kubernetes.io domain.
func isNativeResource(name corev1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || strings.Contains(string(name), "kubernetes.io/")
}

// isExtendedResource reports whether name is a device-plugin style
// resource such as example.com/gpu.
func isExtendedResource(name corev1.ResourceName) bool {
	if isNativeResource(name) || strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(content.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+string(name))) == 0
}

// isOvercommitAllowed reports whether requests of name may be below its
// limit; extended resources and huge pages must match exactly.
func isOvercommitAllowed(name corev1.ResourceName) bool {
	return isNativeResource(name) && !isHugePageResource(name)
}

func isIntegerResource(name corev1.ResourceName) bool {
	return integerResources[name] || isExtendedResource(name)
}

// validateResourceName checks a compute resource name: qualified, and
// standard when unprefixed.
func validateResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	errs := validateQualifiedName(string(name), fldPath)
	if len(errs) != 0 {
		return errs
	}
	if !strings.Contains(string(name), "/") && !standardResources[name] && !isQuotaHugePageResource(name) {
		return field.ErrorList{field.Invalid(fldPath, name, "must be a standard resource type or fully qualified")}
	}
	return nil
}

// validateContainerResourceName checks a name in a container's requests or
// limits.
func validateContainerResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	errs := validateResourceName(name, fldPath)
	if !strings.Contains(string(name), "/") {
		if !standardContainerResources[name] && !isHugePageResource(name) {
			return append(errs, field.Invalid(fldPath, name, "must be a standard resource for containers"))
		}
	} else if !isNativeResource(name) && !isExtendedResource(name) {
		return append(errs, field.Invalid(fldPath, name, "doesn't follow extended resource name standard"))
	}
	return errs
}

func validateQuotaResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	errs := validateResourceName(name, fldPath)
	if !strings.Contains(string(name), "/") && !standardQuotaResources[name] && !isQuotaHugePageResource(name) {
		return append(errs, field.Invalid(fldPath, name, isInvalidQuotaResource))
	}
	return errs
}

// validateQuantity checks that q is not negative, and whole for resources
// counted in units.
func validateQuantity(name corev1.ResourceName, q resource.Quantity, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.Sign() < 0 {
		errs = append(errs, field.Invalid(fldPath, q.String(), isNegativeErrorMsg))
	}
	if isIntegerResource(name) && q.MilliValue()%1000 != 0 {
		errs = append(errs, field.Invalid(fldPath, q, isNotIntegerErrorMsg))
	}
	return errs
}

// roundResources rounds every quantity of list up to milli precision, as
// upstream's defaulting does for all resource lists.
func roundResources(list corev1.ResourceList) {
	for name, q := range list {
		q.RoundUp(resource.Milli)
		list[name] = q
	}
}
