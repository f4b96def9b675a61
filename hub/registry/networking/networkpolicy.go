package networking

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// networkPolicyRules are the rules of networkpolicies, with ages measured
// against now (nil is the wall clock). A networkpolicy has no status (its
// v1 type has none), no field selectors beyond metadata's, and a PUT does
// not create one.
func networkPolicyRules(now func() time.Time) *typed.Rules[*networkingv1.NetworkPolicy] {
	return &typed.Rules[*networkingv1.NetworkPolicy]{
		Now:          now,
		Defaults:     defaultNetworkPolicy,
		Check:        validateNetworkPolicy,
		CheckUpdate:  validateNetworkPolicyUpdate,
		TableColumns: networkPolicyColumns(),
		TableRow:     networkPolicyRow,
	}
}

// defaultNetworkPolicy applies upstream's defaults: ports' protocol TCP,
// and policyTypes, when unset, from the rules present: Ingress always
// (a policy without rules isolates its pods' ingress), Egress when it has
// egress rules.
func defaultNetworkPolicy(np *networkingv1.NetworkPolicy) {
	s := &np.Spec
	for i := range s.Ingress {
		defaultPorts(s.Ingress[i].Ports)
	}
	for i := range s.Egress {
		defaultPorts(s.Egress[i].Ports)
	}
	if len(s.PolicyTypes) == 0 {
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(s.Egress) > 0 {
			s.PolicyTypes = append(s.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
}

func defaultPorts(ports []networkingv1.NetworkPolicyPort) {
	for i := range ports {
		if ports[i].Protocol == nil {
			ports[i].Protocol = new(corev1.ProtocolTCP)
		}
	}
}

// policyOptions relax validation for what an older hub or Kubernetes
// accepted and a stored policy may still hold.
type policyOptions struct {
	// invalidLabelValues allows label values in selectors that are not
	// valid label values, when the stored pod selector has one.
	invalidLabelValues bool
	// oldCIDRs are CIDRs the stored policy holds, accepted even if they
	// are no longer valid (such as with leading zeros).
	oldCIDRs []string
}

func validateNetworkPolicy(np *networkingv1.NetworkPolicy) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&np.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateNetworkPolicySpec(&np.Spec, policyOptions{}, specPath)...)
}

func validateNetworkPolicyUpdate(np, old *networkingv1.NetworkPolicy) field.ErrorList {
	opts := policyOptions{
		invalidLabelValues: metav1validation.LabelSelectorHasInvalidLabelValue(&old.Spec.PodSelector),
		oldCIDRs:           policyCIDRs(&old.Spec),
	}
	errs := apivalidation.ValidateObjectMetaUpdate(&np.ObjectMeta, &old.ObjectMeta, metadataPath)
	return append(errs, validateNetworkPolicySpec(&np.Spec, opts, specPath)...)
}

// policyCIDRs returns every CIDR of s's ipBlock peers, excepts included.
func policyCIDRs(s *networkingv1.NetworkPolicySpec) []string {
	var cidrs []string
	add := func(peers []networkingv1.NetworkPolicyPeer) {
		for _, p := range peers {
			if p.IPBlock != nil {
				cidrs = append(cidrs, p.IPBlock.CIDR)
				cidrs = append(cidrs, p.IPBlock.Except...)
			}
		}
	}
	for _, r := range s.Ingress {
		add(r.From)
	}
	for _, r := range s.Egress {
		add(r.To)
	}
	return cidrs
}

var policyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}

func validateNetworkPolicySpec(s *networkingv1.NetworkPolicySpec, opts policyOptions, fld *field.Path) field.ErrorList {
	selOpts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: opts.invalidLabelValues}
	errs := metav1validation.ValidateLabelSelector(&s.PodSelector, selOpts, fld.Child("podSelector"))
	for i, r := range s.Ingress {
		p := fld.Child("ingress").Index(i)
		for j := range r.Ports {
			errs = append(errs, validatePolicyPort(&r.Ports[j], p.Child("ports").Index(j))...)
		}
		for j := range r.From {
			errs = append(errs, validatePeer(&r.From[j], opts, p.Child("from").Index(j))...)
		}
	}
	for i, r := range s.Egress {
		p := fld.Child("egress").Index(i)
		for j := range r.Ports {
			errs = append(errs, validatePolicyPort(&r.Ports[j], p.Child("ports").Index(j))...)
		}
		for j := range r.To {
			errs = append(errs, validatePeer(&r.To[j], opts, p.Child("to").Index(j))...)
		}
	}
	tp := fld.Child("policyTypes")
	if len(s.PolicyTypes) > len(policyTypes) {
		return append(errs, field.Invalid(tp, s.PolicyTypes, "may not specify more than two policyTypes"))
	}
	for i, t := range s.PolicyTypes {
		if !slices.Contains(policyTypes, t) {
			errs = append(errs, field.NotSupported(tp.Index(i), t, policyTypes))
		}
	}
	return errs
}

var policyProtocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}

// validatePolicyPort checks a port of a rule: a number (or a range up to
// endPort) or a port name, and its protocol.
func validatePolicyPort(port *networkingv1.NetworkPolicyPort, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if port.Protocol != nil && !slices.Contains(policyProtocols, *port.Protocol) {
		errs = append(errs, field.NotSupported(fld.Child("protocol"), *port.Protocol, policyProtocols))
	}
	switch {
	case port.Port == nil:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(fld.Child("endPort"), *port.EndPort, "may not be specified when `port` is not specified"))
		}
	case port.Port.Type == intstr.Int:
		for _, msg := range validation.IsValidPortNum(int(port.Port.IntVal)) {
			errs = append(errs, field.Invalid(fld.Child("port"), port.Port.IntVal, msg))
		}
		if port.EndPort != nil {
			if *port.EndPort < port.Port.IntVal {
				errs = append(errs, field.Invalid(fld.Child("endPort"), *port.EndPort, "must be greater than or equal to `port`"))
			}
			for _, msg := range validation.IsValidPortNum(int(*port.EndPort)) {
				errs = append(errs, field.Invalid(fld.Child("endPort"), *port.EndPort, msg))
			}
		}
	default:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(fld.Child("endPort"), *port.EndPort, "may not be specified when `port` is non-numeric"))
		}
		for _, msg := range validation.IsValidPortName(port.Port.StrVal) {
			errs = append(errs, field.Invalid(fld.Child("port"), port.Port.StrVal, msg))
		}
	}
	return errs
}

// validatePeer checks a rule's peer: selectors, or an ipBlock alone.
func validatePeer(peer *networkingv1.NetworkPolicyPeer, opts policyOptions, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	selOpts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: opts.invalidLabelValues}
	n := 0
	if peer.PodSelector != nil {
		n++
		errs = append(errs, metav1validation.ValidateLabelSelector(peer.PodSelector, selOpts, fld.Child("podSelector"))...)
	}
	if peer.NamespaceSelector != nil {
		n++
		errs = append(errs, metav1validation.ValidateLabelSelector(peer.NamespaceSelector, selOpts, fld.Child("namespaceSelector"))...)
	}
	if peer.IPBlock != nil {
		n++
		errs = append(errs, validateIPBlock(peer.IPBlock, opts, fld.Child("ipBlock"))...)
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(fld, "must specify a peer"))
	case n > 1 && peer.IPBlock != nil:
		errs = append(errs, field.Forbidden(fld, "may not specify both ipBlock and another peer"))
	}
	return errs
}

// validateIPBlock checks an ipBlock's CIDR and that each exception lies
// strictly within it.
func validateIPBlock(b *networkingv1.IPBlock, opts policyOptions, fld *field.Path) field.ErrorList {
	cp := fld.Child("cidr")
	if b.CIDR == "" {
		return field.ErrorList{field.Required(cp, "")}
	}
	errs := validation.IsValidCIDRForLegacyField(cp, b.CIDR, true, opts.oldCIDRs)
	// Sloppy parsing, as the checks above may have let an old CIDR
	// with leading zeros through.
	_, cidr, err := netutils.ParseCIDRSloppy(b.CIDR)
	if err != nil {
		return errs // reported above
	}
	for i, e := range b.Except {
		ep := fld.Child("except").Index(i)
		if eErrs := validation.IsValidCIDRForLegacyField(ep, e, true, opts.oldCIDRs); len(eErrs) > 0 {
			errs = append(errs, eErrs...)
			continue
		}
		_, except, err := netutils.ParseCIDRSloppy(e)
		if err != nil {
			continue
		}
		bits, _ := cidr.Mask.Size()
		exceptBits, _ := except.Mask.Size()
		if !cidr.Contains(except.IP) || bits >= exceptBits {
			errs = append(errs, field.Invalid(ep, e, "must be a strict subset of `cidr`"))
		}
	}
	return errs
}

func networkPolicyColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Pod-Selector", Type: "string", Description: networkingv1.NetworkPolicySpec{}.SwaggerDoc()["podSelector"]},
		typed.AgeColumn,
	}
}

func networkPolicyRow(np *networkingv1.NetworkPolicy, now time.Time) []interface{} {
	return []interface{}{np.Name, metav1.FormatLabelSelector(&np.Spec.PodSelector), typed.Age(now, np.CreationTimestamp)}
}
