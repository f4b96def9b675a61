package networking

import (
	"fmt"
	"slices"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// ingressClassAnnotation is the class annotation that came before
// spec.ingressClassName; upstream still honours it.
const ingressClassAnnotation = "kubernetes.io/ingress.class"

// ingressRules are the rules of ingresses, with ages measured against now
// (nil is the wall clock). An ingress has no defaults (v1 requires
// pathType), no field selectors beyond metadata's, and a PUT does not
// create one. Its status, the load balancer's addresses, is its
// controller's to write through the status subresource.
func ingressRules(now func() time.Time) *typed.Rules[*networkingv1.Ingress] {
	return &typed.Rules[*networkingv1.Ingress]{
		Now:           now,
		PrepareCreate: func(ing *networkingv1.Ingress) { ing.Status = networkingv1.IngressStatus{} },
		PrepareUpdate: func(ing, old *networkingv1.Ingress) { ing.Status = old.Status },
		Check:         validateIngressCreate,
		CheckUpdate:   validateIngressUpdate,
		CheckStatus:   validateIngressStatusUpdate,
		TableColumns:  ingressColumns(),
		TableRow:      ingressRow,
	}
}

// ingressOptions relax validation for what a stored ingress may hold
// from before a rule was tightened, so that it stays updatable.
type ingressOptions struct {
	// invalidSecretNames allows TLS secret names that are not DNS
	// subdomains.
	invalidSecretNames bool
	// invalidWildcardRules skips the checks of the paths of rules with a
	// wildcard host.
	invalidWildcardRules bool
	// labelServiceNames allows backend service names that are DNS labels
	// but not DNS-1035 labels (starting with a digit).
	labelServiceNames bool
}

func validateIngressCreate(ing *networkingv1.Ingress) field.ErrorList {
	errs := validateIngress(ing, ingressOptions{})
	if class, ok := ing.Annotations[ingressClassAnnotation]; ok && ing.Spec.IngressClassName != nil && class != *ing.Spec.IngressClassName {
		// Upstream's path, without metadata: kept for clients that
		// match on it.
		errs = append(errs, field.Invalid(field.NewPath("annotations").Child(ingressClassAnnotation), class, "must match `ingressClassName` when both are specified"))
	}
	return errs
}

func validateIngressUpdate(ing, old *networkingv1.Ingress) field.ErrorList {
	opts := ingressOptions{
		invalidSecretNames:   slices.ContainsFunc(old.Spec.TLS, func(t networkingv1.IngressTLS) bool { return len(validateTLSSecretName(t.SecretName)) > 0 }),
		invalidWildcardRules: hasInvalidWildcardRule(old.Spec.Rules),
		labelServiceNames:    hasLabelServiceName(&old.Spec),
	}
	errs := apivalidation.ValidateObjectMetaUpdate(&ing.ObjectMeta, &old.ObjectMeta, metadataPath)
	return append(errs, validateIngress(ing, opts)...)
}

func validateIngress(ing *networkingv1.Ingress, opts ingressOptions) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&ing.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateIngressSpec(&ing.Spec, opts, specPath)...)
}

func validateIngressSpec(s *networkingv1.IngressSpec, opts ingressOptions, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(s.Rules) == 0 && s.DefaultBackend == nil {
		errs = append(errs, field.Invalid(fld, s.Rules, "either `defaultBackend` or `rules` must be specified"))
	}
	if s.DefaultBackend != nil {
		errs = append(errs, validateBackend(s.DefaultBackend, opts, fld.Child("defaultBackend"))...)
	}
	for i := range s.Rules {
		errs = append(errs, validateIngressRule(&s.Rules[i], opts, fld.Child("rules").Index(i))...)
	}
	for i, t := range s.TLS {
		p := fld.Child("tls").Index(i)
		for j, h := range t.Hosts {
			errs = append(errs, validateHost(h, p.Child("hosts").Index(j))...)
		}
		if !opts.invalidSecretNames {
			for _, msg := range validateTLSSecretName(t.SecretName) {
				errs = append(errs, field.Invalid(p.Child("secretName"), t.SecretName, msg))
			}
		}
	}
	if s.IngressClassName != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*s.IngressClassName, false) {
			errs = append(errs, field.Invalid(fld.Child("ingressClassName"), *s.IngressClassName, msg))
		}
	}
	return errs
}

// validateHost checks a host of a rule or a TLS entry: a DNS name, which
// may start with a "*." wildcard label.
func validateHost(host string, fld *field.Path) field.ErrorList {
	check := content.IsDNS1123Subdomain
	if strings.Contains(host, "*") {
		check = validation.IsWildcardDNS1123Subdomain
	}
	var errs field.ErrorList
	for _, msg := range check(host) {
		errs = append(errs, field.Invalid(fld, host, msg))
	}
	return errs
}

func validateIngressRule(r *networkingv1.IngressRule, opts ingressOptions, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	wildcard := strings.Contains(r.Host, "*")
	if r.Host != "" {
		if netutils.ParseIPSloppy(r.Host) != nil {
			errs = append(errs, field.Invalid(fld.Child("host"), r.Host, "must be a DNS name, not an IP address"))
		}
		errs = append(errs, validateHost(r.Host, fld.Child("host"))...)
	}
	if !wildcard || !opts.invalidWildcardRules {
		errs = append(errs, validateRuleValue(&r.IngressRuleValue, opts, fld)...)
	}
	return errs
}

func validateRuleValue(v *networkingv1.IngressRuleValue, opts ingressOptions, fld *field.Path) field.ErrorList {
	if v.HTTP == nil {
		return nil
	}
	var errs field.ErrorList
	pp := fld.Child("http", "paths")
	if len(v.HTTP.Paths) == 0 {
		errs = append(errs, field.Required(pp, ""))
	}
	for i := range v.HTTP.Paths {
		errs = append(errs, validateHTTPPath(&v.HTTP.Paths[i], opts, pp.Index(i))...)
	}
	return errs
}

// hasInvalidWildcardRule reports whether rules hold a rule with a
// wildcard host whose paths fail validation, which upstream once allowed.
func hasInvalidWildcardRule(rules []networkingv1.IngressRule) bool {
	return slices.ContainsFunc(rules, func(r networkingv1.IngressRule) bool {
		return strings.Contains(r.Host, "*") && len(validateRuleValue(&r.IngressRuleValue, ingressOptions{}, field.NewPath("rule"))) > 0
	})
}

var (
	pathTypes = []networkingv1.PathType{networkingv1.PathTypeExact, networkingv1.PathTypeImplementationSpecific, networkingv1.PathTypePrefix}
	// What a path of type Exact or Prefix may not contain or end with:
	// proxies would read it differently from one another.
	invalidPathSequences = []string{"//", "/./", "/../", "%2f", "%2F"}
	invalidPathSuffixes  = []string{"/..", "/."}
)

// validateHTTPPath checks a path of a rule: its type, required in v1, the
// path itself as that type reads it, and its backend.
func validateHTTPPath(p *networkingv1.HTTPIngressPath, opts ingressOptions, fld *field.Path) field.ErrorList {
	if p.PathType == nil {
		return field.ErrorList{field.Required(fld.Child("pathType"), "pathType must be specified")}
	}
	var errs field.ErrorList
	pp := fld.Child("path")
	switch *p.PathType {
	case networkingv1.PathTypeExact, networkingv1.PathTypePrefix:
		if !strings.HasPrefix(p.Path, "/") {
			errs = append(errs, field.Invalid(pp, p.Path, "must be an absolute path"))
		}
		for _, seq := range invalidPathSequences {
			if strings.Contains(p.Path, seq) {
				errs = append(errs, field.Invalid(pp, p.Path, fmt.Sprintf("must not contain '%s'", seq)))
			}
		}
		for _, suffix := range invalidPathSuffixes {
			if strings.HasSuffix(p.Path, suffix) {
				errs = append(errs, field.Invalid(pp, p.Path, fmt.Sprintf("cannot end with '%s'", suffix)))
			}
		}
	case networkingv1.PathTypeImplementationSpecific:
		if p.Path != "" && !strings.HasPrefix(p.Path, "/") {
			errs = append(errs, field.Invalid(pp, p.Path, "must be an absolute path"))
		}
	default:
		errs = append(errs, field.NotSupported(fld.Child("pathType"), *p.PathType, pathTypes))
	}
	return append(errs, validateBackend(&p.Backend, opts, fld.Child("backend"))...)
}

// validateBackend checks a backend: a service (by name, and port name or
// number) or a resource, exactly one of them.
func validateBackend(b *networkingv1.IngressBackend, opts ingressOptions, fld *field.Path) field.ErrorList {
	switch {
	case b.Resource != nil && b.Service != nil:
		return field.ErrorList{field.Invalid(fld, "", "cannot set both resource and service backends")}
	case b.Resource != nil:
		return validateObjectReference(b.Resource.APIGroup, b.Resource.Kind, b.Resource.Name, fld.Child("resource"))
	case b.Service == nil:
		return field.ErrorList{field.Invalid(fld, "", "resource or service backend is required")}
	}
	var errs field.ErrorList
	svc, sp := b.Service, fld.Child("service")
	if svc.Name == "" {
		errs = append(errs, field.Required(sp.Child("name"), ""))
	} else {
		check := apivalidation.NameIsDNS1035Label // a Service's name rule
		if opts.labelServiceNames {
			check = apivalidation.NameIsDNSLabel
		}
		for _, msg := range check(svc.Name, false) {
			errs = append(errs, field.Invalid(sp.Child("name"), svc.Name, msg))
		}
	}
	switch port := svc.Port; {
	case port.Name != "" && port.Number != 0:
		errs = append(errs, field.Invalid(fld, "", "cannot set both port name & port number"))
	case port.Name != "":
		for _, msg := range validation.IsValidPortName(port.Name) {
			errs = append(errs, field.Invalid(sp.Child("port", "name"), port.Name, msg))
		}
	case port.Number != 0:
		for _, msg := range validation.IsValidPortNum(int(port.Number)) {
			errs = append(errs, field.Invalid(sp.Child("port", "number"), port.Number, msg))
		}
	default:
		errs = append(errs, field.Required(fld, "port name or number is required"))
	}
	return errs
}

// hasLabelServiceName reports whether s names a backend service by a DNS
// label that is not a DNS-1035 label, which upstream accepts on update
// of an ingress holding one.
func hasLabelServiceName(s *networkingv1.IngressSpec) bool {
	label := func(b *networkingv1.IngressBackend) bool {
		return b != nil && b.Service != nil &&
			len(apivalidation.NameIsDNSLabel(b.Service.Name, false)) == 0 &&
			len(apivalidation.NameIsDNS1035Label(b.Service.Name, false)) > 0
	}
	if label(s.DefaultBackend) {
		return true
	}
	for _, r := range s.Rules {
		if r.HTTP == nil {
			continue
		}
		for i := range r.HTTP.Paths {
			if label(&r.HTTP.Paths[i].Backend) {
				return true
			}
		}
	}
	return false
}

// validateObjectReference checks a reference to an object by API group
// (nil or empty for the core group), kind and name.
func validateObjectReference(group *string, kind, name string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if group != nil {
		for _, msg := range content.IsDNS1123Subdomain(*group) {
			errs = append(errs, field.Invalid(fld.Child("apiGroup"), *group, msg))
		}
	}
	for _, f := range []struct{ name, value string }{{"kind", kind}, {"name", name}} {
		if f.value == "" {
			errs = append(errs, field.Required(fld.Child(f.name), ""))
			continue
		}
		for _, msg := range content.IsPathSegmentName(f.value) {
			errs = append(errs, field.Invalid(fld.Child(f.name), f.value, msg))
		}
	}
	return errs
}

// validateTLSSecretName checks a TLS entry's secret name, which may be
// empty (the controller's default certificate).
func validateTLSSecretName(name string) []string {
	if name == "" {
		return nil
	}
	return apivalidation.NameIsDNSSubdomain(name, false)
}

// validateIngressStatusUpdate checks the load balancer's addresses a
// controller reports: IPs (an old one kept even if no longer valid) and
// DNS names that are not IPs.
func validateIngressStatusUpdate(ing, old *networkingv1.Ingress) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&ing.ObjectMeta, &old.ObjectMeta, metadataPath)
	var oldIPs []string
	for _, in := range old.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			oldIPs = append(oldIPs, in.IP)
		}
	}
	fld := field.NewPath("status", "loadBalancer", "ingress")
	for i, in := range ing.Status.LoadBalancer.Ingress {
		p := fld.Index(i)
		if in.IP != "" {
			errs = append(errs, validation.IsValidIPForLegacyField(p.Child("ip"), in.IP, true, oldIPs)...)
		}
		if in.Hostname != "" {
			for _, msg := range content.IsDNS1123Subdomain(in.Hostname) {
				errs = append(errs, field.Invalid(p.Child("hostname"), in.Hostname, msg))
			}
			if netutils.ParseIPSloppy(in.Hostname) != nil {
				errs = append(errs, field.Invalid(p.Child("hostname"), in.Hostname, "must be a DNS name, not an IP address"))
			}
		}
	}
	return errs
}

func ingressColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Class", Type: "string", Description: "The name of the IngressClass resource that should be used for additional configuration"},
		{Name: "Hosts", Type: "string", Description: "Hosts that incoming requests are matched against before the ingress rule"},
		{Name: "Address", Type: "string", Description: "Address is a list containing ingress points for the load-balancer"},
		{Name: "Ports", Type: "string", Description: "Ports of TLS configurations that open"},
		typed.AgeColumn,
	}
}

// maxHosts is how many hosts the HOSTS cell names before "+ N more...".
const maxHosts = 3

// ingressRow is ing's cells for ingressColumns. The ADDRESS cell is
// unclipped, as the server renders it for -o wide.
func ingressRow(ing *networkingv1.Ingress, now time.Time) []interface{} {
	class := "<none>"
	if ing.Spec.IngressClassName != nil {
		class = *ing.Spec.IngressClassName
	}
	ports := "80"
	if len(ing.Spec.TLS) > 0 {
		ports = "80, 443"
	}
	return []interface{}{ing.Name, class, ingressHosts(ing.Spec.Rules), ingressAddress(&ing.Status.LoadBalancer), ports, typed.Age(now, ing.CreationTimestamp)}
}

// ingressHosts is the HOSTS cell: the first hosts of rules, or "*" when
// none names one.
func ingressHosts(rules []networkingv1.IngressRule) string {
	var hosts []string
	more := false
	for _, r := range rules {
		if len(hosts) == maxHosts {
			more = true
			break
		}
		if r.Host != "" {
			hosts = append(hosts, r.Host)
		}
	}
	if len(hosts) == 0 {
		return "*"
	}
	s := strings.Join(hosts, ",")
	if more {
		// Upstream counts the rules left beyond the first three, with
		// or without hosts.
		s += fmt.Sprintf(" + %d more...", len(rules)-maxHosts)
	}
	return s
}

// ingressAddress is the ADDRESS cell: the load balancer's IPs, or its
// hostnames where it has no IP, sorted and without repeats.
func ingressAddress(lb *networkingv1.IngressLoadBalancerStatus) string {
	addrs := sets.New[string]()
	for _, in := range lb.Ingress {
		if in.IP != "" {
			addrs.Insert(in.IP)
		} else if in.Hostname != "" {
			addrs.Insert(in.Hostname)
		}
	}
	return strings.Join(sets.List(addrs), ",")
}
