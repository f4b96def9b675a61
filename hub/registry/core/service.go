package core

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Services. Allocation of cluster IPs and node ports is the machinery's;
// these rules keep what was allocated across updates, as upstream's
// service REST does, and leave clusterIP as the client gave it on create.

// serviceResource returns the services, allocating from cfg.
func serviceResource(now func() time.Time, cfg ServiceConfig) apiserver.Resource {
	fam := cfg.family()
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "Service",
		Plural:       "services",
		Singular:     "service",
		ShortNames:   []string{"svc"},
		Categories:   []string{"all"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.Service{} },
		NewList:      func() runtime.Object { return &corev1.ServiceList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Rules: serviceRules{&typed.Rules[*corev1.Service]{
			Now:            now,
			Defaults:       defaultService,
			PrepareCreate:  func(svc *corev1.Service) { prepareServiceForCreate(svc, fam) },
			PrepareUpdate:  func(svc, old *corev1.Service) { prepareServiceForUpdate(svc, old, fam) },
			Check:          validateService,
			CheckUpdate:    validateServiceUpdate,
			CreateOnUpdate: true,
			TableColumns:   serviceColumns,
			TableRow:       serviceRow,
			CheckStatus:    validateServiceStatusUpdate,
		}, cfg},
	}
}

// externallyAccessible reports whether traffic from outside the cluster
// may reach svc, which is when externalTrafficPolicy applies.
func externallyAccessible(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer ||
		svc.Spec.Type == corev1.ServiceTypeNodePort ||
		(svc.Spec.Type == corev1.ServiceTypeClusterIP && len(svc.Spec.ExternalIPs) > 0)
}

func needsNodePorts(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort ||
		(svc.Spec.Type == corev1.ServiceTypeLoadBalancer && (svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts))
}

func needsHealthCheckNodePort(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func isHeadless(svc *corev1.Service) bool {
	return len(svc.Spec.ClusterIPs) == 1 && svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone
}

func defaultService(svc *corev1.Service) {
	spec := &svc.Spec
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if spec.SessionAffinity == corev1.ServiceAffinityNone {
		spec.SessionAffinityConfig = nil
	}
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP &&
		(spec.SessionAffinityConfig == nil || spec.SessionAffinityConfig.ClientIP == nil || spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil) {
		spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{
			ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo(corev1.DefaultClientIPServiceAffinitySeconds)},
		}
	}
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if externallyAccessible(svc) && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if spec.InternalTrafficPolicy == nil && (spec.Type == corev1.ServiceTypeClusterIP ||
		spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer) {
		spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyCluster)
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		spec.AllocateLoadBalancerNodePorts = ptrTo(true)
	}
}

// prepareServiceForCreate clears status, fills clusterIPs from clusterIP
// for clients that only know the latter, and picks the IP families (fam,
// the cluster's, when the client asked for none).
func prepareServiceForCreate(svc *corev1.Service, fam corev1.IPFamily) {
	svc.Status = corev1.ServiceStatus{}
	if svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
	initIPFamilies(svc, nil, fam)
}

// prepareServiceForUpdate keeps status, puts back allocated values the
// client left out (cluster IPs, node ports, families) as upstream's
// service REST does for idempotent `kubectl apply`, and drops values the
// new type does not use when the client did not change them.
func prepareServiceForUpdate(svc, old *corev1.Service, fam corev1.IPFamily) {
	svc.Status = old.Status
	if svc.Spec.Type != corev1.ServiceTypeExternalName && old.Spec.Type != corev1.ServiceTypeExternalName {
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = old.Spec.ClusterIP
		}
		if len(svc.Spec.ClusterIPs) == 0 && len(old.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIP == old.Spec.ClusterIP {
			svc.Spec.ClusterIPs = old.Spec.ClusterIPs
		}
	}
	if svc.Spec.ClusterIP != old.Spec.ClusterIP && sameStrings(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) {
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIPs = nil
		} else {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
	}
	if needsNodePorts(old) && needsNodePorts(svc) {
		used := sets.New[int32]()
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				used.Insert(p.NodePort)
			}
		}
		byName := map[string]int32{}
		for _, p := range old.Spec.Ports {
			byName[p.Name] = p.NodePort
		}
		for i := range svc.Spec.Ports {
			if p := &svc.Spec.Ports[i]; p.NodePort == 0 && !used.Has(byName[p.Name]) {
				p.NodePort = byName[p.Name]
			}
		}
	}
	if needsHealthCheckNodePort(old) && needsHealthCheckNodePort(svc) && svc.Spec.HealthCheckNodePort == 0 {
		svc.Spec.HealthCheckNodePort = old.Spec.HealthCheckNodePort
	}
	dropTypeDependentFields(svc, old)
	initIPFamilies(svc, old, fam)
}

func dropTypeDependentFields(svc, old *corev1.Service) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName && old.Spec.Type != corev1.ServiceTypeExternalName {
		if svc.Spec.ClusterIP == old.Spec.ClusterIP && sameStrings(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) {
			svc.Spec.ClusterIP = ""
			svc.Spec.ClusterIPs = nil
		}
		if sameFamilies(svc.Spec.IPFamilies, old.Spec.IPFamilies) {
			svc.Spec.IPFamilies = nil
		}
		if samePtr(svc.Spec.IPFamilyPolicy, old.Spec.IPFamilyPolicy) {
			svc.Spec.IPFamilyPolicy = nil
		}
	}
	if !needsNodePorts(svc) && needsNodePorts(old) && sameNodePorts(svc, old) {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
	if !needsHealthCheckNodePort(svc) && svc.Spec.HealthCheckNodePort == old.Spec.HealthCheckNodePort {
		svc.Spec.HealthCheckNodePort = 0
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		if samePtr(svc.Spec.AllocateLoadBalancerNodePorts, old.Spec.AllocateLoadBalancerNodePorts) {
			svc.Spec.AllocateLoadBalancerNodePorts = nil
		}
		if samePtr(svc.Spec.LoadBalancerClass, old.Spec.LoadBalancerClass) {
			svc.Spec.LoadBalancerClass = nil
		}
	}
	if !externallyAccessible(svc) && svc.Spec.ExternalTrafficPolicy == old.Spec.ExternalTrafficPolicy {
		svc.Spec.ExternalTrafficPolicy = ""
	}
}

// initIPFamilies fills ipFamilyPolicy and ipFamilies that the client left
// out: from the stored service on update, else single-stack in the family
// of the requested cluster IP (fam when none). Headless services without
// a selector require dual-stack, as upstream does, but get the one family
// the hub serves. ExternalName services have neither.
func initIPFamilies(svc, old *corev1.Service, fam corev1.IPFamily) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	if old != nil && old.Spec.Type != corev1.ServiceTypeExternalName && isHeadless(old) == isHeadless(svc) {
		if svc.Spec.IPFamilyPolicy == nil {
			svc.Spec.IPFamilyPolicy = old.Spec.IPFamilyPolicy
		}
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = old.Spec.IPFamilies
		}
	}
	if svc.Spec.IPFamilyPolicy == nil {
		policy := corev1.IPFamilyPolicySingleStack
		if isHeadless(svc) && len(svc.Spec.Selector) == 0 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		svc.Spec.IPFamilyPolicy = &policy
	}
	if len(svc.Spec.IPFamilies) == 0 {
		for _, ip := range svc.Spec.ClusterIPs {
			switch {
			case ip == corev1.ClusterIPNone:
			case isIPv6(ip):
				svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, corev1.IPv6Protocol)
			default:
				svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, corev1.IPv4Protocol)
			}
		}
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{fam}
		}
	}
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sameFamilies(a, b []corev1.IPFamily) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func samePtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameNodePorts(svc, old *corev1.Service) bool {
	if len(svc.Spec.Ports) != len(old.Spec.Ports) {
		return false
	}
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].NodePort != old.Spec.Ports[i].NodePort {
			return false
		}
	}
	return true
}

// Validation, after ValidateService upstream. Not checked: that
// type LoadBalancer with externalTrafficPolicy Local has a
// healthCheckNodePort, since the machinery allocates it after validation.

// maxClientIPServiceAffinitySeconds is the longest ClientIP session
// affinity, a day.
const maxClientIPServiceAffinitySeconds = 86400

var (
	supportedServiceTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort}
	supportedIPFamilyPolicies = []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack,
		corev1.IPFamilyPolicyRequireDualStack, corev1.IPFamilyPolicySingleStack}
	supportedTrafficDistributions = []string{corev1.ServiceTrafficDistributionPreferClose,
		corev1.ServiceTrafficDistributionPreferSameNode, corev1.ServiceTrafficDistributionPreferSameZone}
)

func validateService(svc *corev1.Service) field.ErrorList {
	errs := validateObjectMeta(&svc.ObjectMeta, true, apimachineryvalidation.NameIsDNS1035Label)
	spec := &svc.Spec
	portsPath := specPath.Child("ports")
	if len(spec.Ports) == 0 && !isHeadless(svc) && spec.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Required(portsPath, ""))
	}
	switch spec.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		if isHeadless(svc) {
			errs = append(errs, field.Invalid(specPath.Child("clusterIPs").Index(0), spec.ClusterIPs[0],
				fmt.Sprintf("may not be set to 'None' for %s services", spec.Type)))
		}
	case corev1.ServiceTypeExternalName:
		if len(spec.ClusterIPs) > 0 {
			errs = append(errs, field.Forbidden(specPath.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(spec.IPFamilies) > 0 {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if spec.IPFamilyPolicy != nil {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
		if cname := strings.TrimSuffix(spec.ExternalName, "."); cname != "" {
			errs = append(errs, validateDNS1123Subdomain(cname, specPath.Child("externalName"))...)
		} else {
			errs = append(errs, field.Required(specPath.Child("externalName"), ""))
		}
	}

	names := sets.New[string]()
	ports := map[corev1.ServicePort]bool{}
	nodePorts := map[corev1.ServicePort]bool{}
	for i := range spec.Ports {
		sp := &spec.Ports[i]
		p := portsPath.Index(i)
		errs = append(errs, validateServicePort(sp, len(spec.Ports) > 1, names, p)...)
		if sp.NodePort != 0 {
			switch spec.Type {
			case corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName:
				errs = append(errs, field.Forbidden(p.Child("nodePort"), fmt.Sprintf("may not be used when `type` is '%s'", spec.Type)))
			}
			key := corev1.ServicePort{Protocol: sp.Protocol, NodePort: sp.NodePort}
			if nodePorts[key] {
				errs = append(errs, field.Duplicate(p.Child("nodePort"), sp.NodePort))
			}
			nodePorts[key] = true
		}
		key := corev1.ServicePort{Protocol: sp.Protocol, Port: sp.Port}
		if ports[key] {
			errs = append(errs, field.Duplicate(p, key))
		}
		ports[key] = true
	}

	if spec.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabels(spec.Selector, specPath.Child("selector"))...)
	}
	affinityPath := specPath.Child("sessionAffinity")
	errs = append(errs, validateEnum(spec.SessionAffinity, affinityPath, corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone)...)
	configPath := specPath.Child("sessionAffinityConfig")
	switch spec.SessionAffinity {
	case corev1.ServiceAffinityClientIP:
		cfg := spec.SessionAffinityConfig
		when := fmt.Sprintf("when session affinity type is %s", corev1.ServiceAffinityClientIP)
		switch {
		case cfg == nil:
			errs = append(errs, field.Required(configPath, when))
		case cfg.ClientIP == nil:
			errs = append(errs, field.Required(configPath.Child("clientIP"), when))
		case cfg.ClientIP.TimeoutSeconds == nil:
			errs = append(errs, field.Required(configPath.Child("clientIP", "timeoutSeconds"), when))
		case *cfg.ClientIP.TimeoutSeconds <= 0 || *cfg.ClientIP.TimeoutSeconds > maxClientIPServiceAffinitySeconds:
			errs = append(errs, field.Invalid(configPath.Child("clientIP", "timeoutSeconds"), *cfg.ClientIP.TimeoutSeconds,
				fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPServiceAffinitySeconds)))
		}
	case corev1.ServiceAffinityNone:
		if spec.SessionAffinityConfig != nil {
			errs = append(errs, field.Forbidden(configPath, fmt.Sprintf("must not be set when session affinity is %s", corev1.ServiceAffinityNone)))
		}
	}

	errs = append(errs, validateClusterIPsRelatedFields(svc)...)
	for i, ip := range spec.ExternalIPs {
		p := specPath.Child("externalIPs").Index(i)
		if ipErrs := validation.IsValidIP(p, ip); len(ipErrs) != 0 {
			errs = append(errs, ipErrs...)
		} else {
			errs = append(errs, validateNonSpecialIP(ip, p)...)
		}
	}
	errs = append(errs, validateEnum(spec.Type, specPath.Child("type"), supportedServiceTypes...)...)

	if len(spec.LoadBalancerSourceRanges) > 0 {
		p := specPath.Child("LoadBalancerSourceRanges")
		if spec.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
		}
		for i, r := range spec.LoadBalancerSourceRanges {
			errs = append(errs, validation.IsValidCIDR(p.Index(i), strings.TrimSpace(r))...)
		}
	}
	if spec.AllocateLoadBalancerNodePorts != nil && spec.Type != corev1.ServiceTypeLoadBalancer {
		errs = append(errs, field.Forbidden(specPath.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		errs = append(errs, field.Required(field.NewPath("allocateLoadBalancerNodePorts"), ""))
	}
	if spec.LoadBalancerClass != nil {
		if spec.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(specPath.Child("loadBalancerClass"), "may only be used when `type` is 'LoadBalancer'"))
		} else {
			errs = append(errs, validateQualifiedName(*spec.LoadBalancerClass, specPath.Child("loadBalancerClass"))...)
		}
	}

	etpPath := specPath.Child("externalTrafficPolicy")
	if !externallyAccessible(svc) {
		if spec.ExternalTrafficPolicy != "" {
			errs = append(errs, field.Invalid(etpPath, spec.ExternalTrafficPolicy, "may only be set for externally-accessible services"))
		}
	} else {
		errs = append(errs, validateEnum(spec.ExternalTrafficPolicy, etpPath,
			corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal)...)
	}
	hcPath := specPath.Child("healthCheckNodePort")
	if !needsHealthCheckNodePort(svc) {
		if spec.HealthCheckNodePort != 0 {
			errs = append(errs, field.Invalid(hcPath, spec.HealthCheckNodePort, "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		}
	} else if spec.HealthCheckNodePort != 0 {
		errs = append(errs, validatePortNum(spec.HealthCheckNodePort, hcPath)...)
	}

	itpPath := specPath.Child("internalTrafficPolicy")
	if spec.InternalTrafficPolicy == nil {
		if spec.Type == corev1.ServiceTypeClusterIP || spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Required(itpPath, ""))
		}
	} else {
		errs = append(errs, validateEnum(*spec.InternalTrafficPolicy, itpPath,
			corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal)...)
	}
	if td := spec.TrafficDistribution; td != nil {
		ok := false
		for _, v := range supportedTrafficDistributions {
			ok = ok || *td == v
		}
		if !ok {
			errs = append(errs, field.NotSupported(specPath.Child("trafficDistribution"), *td, supportedTrafficDistributions))
		}
	}
	return errs
}

func validateServicePort(sp *corev1.ServicePort, requireName bool, names sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if requireName && sp.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else if sp.Name != "" {
		errs = append(errs, validateDNS1123Label(sp.Name, p.Child("name"))...)
		if names.Has(sp.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), sp.Name))
		} else {
			names.Insert(sp.Name)
		}
	}
	errs = append(errs, validatePortNum(sp.Port, p.Child("port"))...)
	errs = append(errs, validateProtocol(sp.Protocol, p.Child("protocol"))...)
	errs = append(errs, validatePortNumOrName(sp.TargetPort, p.Child("targetPort"))...)
	if sp.NodePort != 0 {
		errs = append(errs, validatePortNum(sp.NodePort, p.Child("nodePort"))...)
	}
	if sp.AppProtocol != nil {
		errs = append(errs, validateQualifiedName(*sp.AppProtocol, p.Child("appProtocol"))...)
	}
	return errs
}

// validateClusterIPsRelatedFields checks clusterIP, clusterIPs,
// ipFamilies and ipFamilyPolicy together.
func validateClusterIPsRelatedFields(svc *corev1.Service) field.ErrorList {
	spec := &svc.Spec
	if spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var errs field.ErrorList
	ipsPath := specPath.Child("clusterIPs")
	familiesPath := specPath.Child("ipFamilies")
	if spec.ClusterIP != "" {
		if len(spec.ClusterIPs) == 0 {
			errs = append(errs, field.Required(ipsPath, ""))
		} else if spec.ClusterIPs[0] != spec.ClusterIP {
			errs = append(errs, field.Invalid(ipsPath, spec.ClusterIPs, "first value must match `clusterIP`"))
		}
	} else if len(spec.ClusterIPs) != 0 {
		errs = append(errs, field.Invalid(ipsPath, spec.ClusterIPs, "must be empty when `clusterIP` is not specified"))
	}
	seen := sets.New[corev1.IPFamily]()
	for i, f := range spec.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			errs = append(errs, field.NotSupported(familiesPath.Index(i), f, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}))
		}
		if seen.Has(f) {
			errs = append(errs, field.Duplicate(familiesPath.Index(i), f))
		}
		seen.Insert(f)
	}
	if p := spec.IPFamilyPolicy; p != nil {
		ok := false
		for _, v := range supportedIPFamilyPolicies {
			ok = ok || *p == v
		}
		if !ok {
			errs = append(errs, field.NotSupported(specPath.Child("ipFamilyPolicy"), *p, supportedIPFamilyPolicies))
		}
	}
	invalid := false
	for i, ip := range spec.ClusterIPs {
		if i == 0 && ip == corev1.ClusterIPNone {
			if len(spec.ClusterIPs) > 1 {
				invalid = true
				errs = append(errs, field.Invalid(ipsPath, spec.ClusterIPs, "'None' must be the first and only value"))
			}
			continue
		}
		ipErrs := validation.IsValidIP(ipsPath.Index(i), ip)
		invalid = invalid || len(ipErrs) > 0
		errs = append(errs, ipErrs...)
	}
	if len(spec.ClusterIPs) > 2 {
		errs = append(errs, field.Invalid(ipsPath, spec.ClusterIPs, "may only hold up to 2 values"))
	}
	if invalid {
		return errs
	}
	if len(spec.ClusterIPs) > 1 && !isDualStack(spec.ClusterIPs) {
		errs = append(errs, field.Invalid(ipsPath, spec.ClusterIPs, "may specify no more than one IP for each IP family"))
	}
	if !isHeadless(svc) {
		for i, ip := range spec.ClusterIPs {
			if i >= len(spec.IPFamilies) {
				break
			}
			if spec.IPFamilies[i] == corev1.IPv4Protocol && isIPv6(ip) {
				errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv4 value as indicated by `ipFamilies[%v]`", i)))
			}
			if spec.IPFamilies[i] == corev1.IPv6Protocol && !isIPv6(ip) {
				errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv6 value as indicated by `ipFamilies[%v]`", i)))
			}
		}
	}
	return errs
}

// validateServiceUpdate adds to validateService that cluster IPs and IP
// families may not change once set, except when the service becomes or
// stops being ExternalName, and that healthCheckNodePort stays.
func validateServiceUpdate(svc, old *corev1.Service) field.ErrorList {
	errs := validateObjectMetaUpdate(&svc.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateClusterIPsUpdate(svc, old)...)
	errs = append(errs, validateIPFamiliesUpdate(svc, old)...)
	if old.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		!samePtr(svc.Spec.LoadBalancerClass, old.Spec.LoadBalancerClass) {
		errs = append(errs, field.Invalid(specPath.Child("loadBalancerClass"), svc.Spec.LoadBalancerClass, "may not change once set"))
	}
	if needsHealthCheckNodePort(old) && needsHealthCheckNodePort(svc) && svc.Spec.HealthCheckNodePort != old.Spec.HealthCheckNodePort {
		errs = append(errs, field.Forbidden(specPath.Child("healthCheckNodePort"), "field is immutable"))
	}
	return append(errs, validateService(svc)...)
}

func validateClusterIPsUpdate(svc, old *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isHeadless(svc) && isHeadless(old) {
		return nil
	}
	ips, oldIPs := svc.Spec.ClusterIPs, old.Spec.ClusterIPs
	first := specPath.Child("clusterIPs").Index(0)
	var errs field.ErrorList
	switch {
	case len(oldIPs) == len(ips):
		for i, ip := range oldIPs {
			if ip != ips[i] {
				errs = append(errs, field.Invalid(specPath.Child("clusterIPs").Index(i), ips, "may not change once set"))
			}
		}
	case len(oldIPs) > len(ips):
		if len(ips) == 0 {
			errs = append(errs, field.Invalid(first, ips, "primary clusterIP can not be unset"))
		}
		if len(oldIPs) > 0 && len(ips) > 0 && ips[0] != oldIPs[0] {
			errs = append(errs, field.Invalid(first, ips, "may not change once set"))
		}
		if len(ips) == 1 && (svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack) {
			errs = append(errs, field.Invalid(specPath.Child("ipFamilyPolicy"), svc.Spec.IPFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary clusterIP"))
		}
	default:
		if len(oldIPs) > 0 && ips[0] != oldIPs[0] {
			errs = append(errs, field.Invalid(first, ips, "may not change once set"))
		}
	}
	return errs
}

func validateIPFamiliesUpdate(svc, old *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isHeadless(svc) || isHeadless(old) {
		return nil
	}
	fams, oldFams := svc.Spec.IPFamilies, old.Spec.IPFamilies
	first := specPath.Child("ipFamilies").Index(0)
	var errs field.ErrorList
	switch {
	case len(oldFams) == len(fams):
		for i, f := range oldFams {
			if f != fams[i] {
				errs = append(errs, field.Invalid(first, fams, "may not change once set"))
			}
		}
	case len(oldFams) > len(fams):
		if len(svc.Spec.ClusterIPs) == 0 {
			errs = append(errs, field.Invalid(first, fams, "primary ipFamily can not be unset"))
		}
		if len(fams) > 0 && fams[0] != oldFams[0] {
			errs = append(errs, field.Invalid(first, svc.Spec.ClusterIPs, "may not change once set"))
		}
		if len(fams) == 1 && (svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack) {
			errs = append(errs, field.Invalid(specPath.Child("ipFamilyPolicy"), svc.Spec.IPFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary ipFamily"))
		}
	default:
		if len(oldFams) > 0 && len(fams) > 0 && fams[0] != oldFams[0] {
			errs = append(errs, field.Invalid(first, svc.Spec.ClusterIPs, "may not change once set"))
		}
	}
	return errs
}

// validateServiceStatusUpdate checks load balancer ingress points.
func validateServiceStatusUpdate(svc, old *corev1.Service) field.ErrorList {
	errs := validateObjectMetaUpdate(&svc.ObjectMeta, &old.ObjectMeta)
	p := field.NewPath("status", "loadBalancer", "ingress")
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		ip := p.Index(i)
		if ing.IP != "" {
			errs = append(errs, validation.IsValidIP(ip.Child("ip"), ing.IP)...)
		}
		if ing.IPMode != nil {
			if ing.IP == "" {
				errs = append(errs, field.Required(ip.Child("ipMode"), "must be specified when `ip` is set"))
			}
			errs = append(errs, validateEnum(*ing.IPMode, ip.Child("ipMode"), corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPModeVIP)...)
		}
		if ing.Hostname != "" {
			errs = append(errs, validateDNS1123Subdomain(ing.Hostname, ip.Child("hostname"))...)
			if _, err := netip.ParseAddr(ing.Hostname); err == nil {
				errs = append(errs, field.Invalid(ip.Child("hostname"), ing.Hostname, "must be a DNS name, not an IP address"))
			}
		}
	}
	return errs
}

// Printing.

var serviceSpecDoc = corev1.ServiceSpec{}.SwaggerDoc()

var serviceColumns = []metav1.TableColumnDefinition{
	nameColumn,
	{Name: "Type", Type: "string", Description: serviceSpecDoc["type"]},
	{Name: "Cluster-IP", Type: "string", Description: serviceSpecDoc["clusterIP"]},
	{Name: "External-IP", Type: "string", Description: serviceSpecDoc["externalIPs"]},
	{Name: "Port(s)", Type: "string", Description: serviceSpecDoc["ports"]},
	ageColumn,
	{Name: "Selector", Type: "string", Priority: 1, Description: serviceSpecDoc["selector"]},
}

func serviceRow(svc *corev1.Service, now time.Time) []interface{} {
	clusterIP := "<none>"
	switch {
	case len(svc.Spec.ClusterIPs) > 0:
		clusterIP = svc.Spec.ClusterIPs[0]
	case svc.Spec.ClusterIP != "":
		clusterIP = svc.Spec.ClusterIP
	}
	ports := make([]string, len(svc.Spec.Ports))
	for i, p := range svc.Spec.Ports {
		ports[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.NodePort > 0 {
			ports[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		}
	}
	portsCell := strings.Join(ports, ",")
	if portsCell == "" {
		portsCell = "<none>"
	}
	return []interface{}{
		svc.Name,
		string(svc.Spec.Type),
		clusterIP,
		serviceExternalIP(svc),
		portsCell,
		age(svc.CreationTimestamp, now),
		labels.FormatLabels(svc.Spec.Selector),
	}
}

// serviceExternalIP is the EXTERNAL-IP cell, unclipped as the server
// renders it for -o wide.
func serviceExternalIP(svc *corev1.Service) string {
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(svc.Spec.ExternalIPs) > 0 {
			return strings.Join(svc.Spec.ExternalIPs, ",")
		}
		return "<none>"
	case corev1.ServiceTypeLoadBalancer:
		lb := sets.New[string]()
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				lb.Insert(ing.IP)
			} else if ing.Hostname != "" {
				lb.Insert(ing.Hostname)
			}
		}
		all := sets.List(lb)
		all = append(all, svc.Spec.ExternalIPs...)
		if len(all) > 0 {
			return strings.Join(all, ",")
		}
		return "<pending>"
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	}
	return "<unknown>"
}
