// Package discovery holds the hub's rules for the discovery.k8s.io/v1
// resource endpointslices: their defaults, validation and printer columns,
// as upstream Kubernetes defines them. Service routing on the edge (netd)
// is programmed from these slices.
package discovery

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Limits of an EndpointSlice, as upstream's.
const (
	maxEndpoints      = 1000
	maxAddresses      = 100
	maxPorts          = 20000
	maxTopologyLabels = 16
	maxZoneHints      = 8
	maxNodeHints      = 8
)

// Resources returns the discovery.k8s.io/v1 resources, with ages in
// printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: discoveryv1.SchemeGroupVersion,
		Kind:         "EndpointSlice",
		Plural:       "endpointslices",
		Singular:     "endpointslice",
		Namespaced:   true,
		New:          func() runtime.Object { return &discoveryv1.EndpointSlice{} },
		NewList:      func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
		AddToScheme:  discoveryv1.AddToScheme,
		Rules:        endpointSliceRules(now),
	}}
}

// endpointSliceRules are the rules of endpointslices, with ages measured
// against now (nil is the wall clock). An endpointslice has no field
// selectors beyond metadata's, and a PUT does not create one.
func endpointSliceRules(now func() time.Time) *typed.Rules[*discoveryv1.EndpointSlice] {
	return &typed.Rules[*discoveryv1.EndpointSlice]{
		Now:           now,
		Defaults:      defaultEndpointSlice,
		PrepareCreate: func(s *discoveryv1.EndpointSlice) { dropDeprecatedTopology(s, nil) },
		PrepareUpdate: dropDeprecatedTopology,
		Check:         validateEndpointSliceCreate,
		CheckUpdate:   validateEndpointSliceUpdate,
		TableColumns:  endpointSliceColumns(),
		TableRow:      endpointSliceRow,
	}
}

// defaultEndpointSlice gives each port a name ("" when unnamed) and the
// TCP protocol, as upstream does; so two unnamed ports are duplicates.
func defaultEndpointSlice(s *discoveryv1.EndpointSlice) {
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Name == nil {
			p.Name = new("")
		}
		if p.Protocol == nil {
			p.Protocol = new(corev1.ProtocolTCP)
		}
	}
}

// dropDeprecatedTopology clears the endpoints' deprecatedTopology, which
// v1 clients may not write: on create (old is nil), and on an update
// unless the endpoints are those of old, as upstream does. An endpoint
// without a nodeName keeps the node its topology named under
// kubernetes.io/hostname, if old named that node too, so that a client
// that rewrites the endpoints from an old read loses nothing.
func dropDeprecatedTopology(s, old *discoveryv1.EndpointSlice) {
	if old != nil && equality.Semantic.DeepEqual(s.Endpoints, old.Endpoints) {
		return
	}
	oldNodes := make(map[string]bool)
	if old != nil {
		for _, ep := range old.Endpoints {
			if n, ok := ep.DeprecatedTopology[corev1.LabelHostname]; ok {
				oldNodes[n] = true
			}
		}
	}
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if n, ok := ep.DeprecatedTopology[corev1.LabelHostname]; ok && ep.NodeName == nil && oldNodes[n] &&
			len(apivalidation.NameIsDNSSubdomain(n, false)) == 0 {
			ep.NodeName = new(n)
		}
		ep.DeprecatedTopology = nil
	}
}

func validateEndpointSliceCreate(s *discoveryv1.EndpointSlice) field.ErrorList {
	return validateEndpointSlice(s, apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")))
}

func validateEndpointSliceUpdate(s, o *discoveryv1.EndpointSlice) field.ErrorList {
	errs := validateEndpointSlice(s, apivalidation.ValidateObjectMetaUpdate(&s.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata")))
	return append(errs, apivalidation.ValidateImmutableField(s.AddressType, o.AddressType, field.NewPath("addressType"))...)
}

// validateEndpointSlice appends to errs, the metadata's errors, those of
// the rest of s.
func validateEndpointSlice(s *discoveryv1.EndpointSlice, errs field.ErrorList) field.ErrorList {
	at := field.NewPath("addressType")
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	case "":
		errs = append(errs, field.Required(at, ""))
	default:
		errs = append(errs, field.NotSupported(at, s.AddressType, []discoveryv1.AddressType{
			discoveryv1.AddressTypeFQDN, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}))
	}
	errs = append(errs, validateEndpoints(s.Endpoints, s.AddressType, field.NewPath("endpoints"))...)
	return append(errs, validatePorts(s.Ports, field.NewPath("ports"))...)
}

func validateEndpoints(endpoints []discoveryv1.Endpoint, addressType discoveryv1.AddressType, fld *field.Path) field.ErrorList {
	if len(endpoints) > maxEndpoints {
		return field.ErrorList{field.TooMany(fld, len(endpoints), maxEndpoints)}
	}
	var errs field.ErrorList
	for i, ep := range endpoints {
		p := fld.Index(i)
		ap := p.Child("addresses")
		switch n := len(ep.Addresses); {
		case n == 0:
			errs = append(errs, field.Required(ap, "must contain at least 1 address"))
		case n > maxAddresses:
			errs = append(errs, field.TooMany(ap, n, maxAddresses))
		}
		for k, a := range ep.Addresses {
			// Addresses of an unknown type were reported with the type.
			switch addressType {
			case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
				errs = append(errs, validateIP(a, addressType, ap.Index(k))...)
			case discoveryv1.AddressTypeFQDN:
				errs = append(errs, validation.IsFullyQualifiedDomainName(ap.Index(k), a)...)
			}
		}
		if n := ep.NodeName; n != nil {
			for _, msg := range apivalidation.NameIsDNSSubdomain(*n, false) {
				errs = append(errs, field.Invalid(p.Child("nodeName"), *n, msg))
			}
		}
		tp := p.Child("deprecatedTopology")
		if n := len(ep.DeprecatedTopology); n > maxTopologyLabels {
			errs = append(errs, field.TooMany(tp, n, maxTopologyLabels))
		}
		errs = append(errs, metav1validation.ValidateLabels(ep.DeprecatedTopology, tp)...)
		if h := ep.Hostname; h != nil {
			for _, msg := range validation.IsDNS1123Label(*h) {
				errs = append(errs, field.Invalid(p.Child("hostname"), *h, msg))
			}
		}
		if ep.Hints != nil {
			errs = append(errs, validateHints(ep.Hints, p.Child("hints"))...)
		}
	}
	return errs
}

// validateIP checks an endpoint's address of an IP address type: an
// address of that family that can receive traffic from other hosts.
func validateIP(a string, addressType discoveryv1.AddressType, fld *field.Path) field.ErrorList {
	if errs := validation.IsValidIPForLegacyField(fld, a, true, nil); len(errs) > 0 {
		return errs
	}
	ip, err := netip.ParseAddr(a)
	if err != nil { // not expected of an address that passed the check above
		return field.ErrorList{field.Invalid(fld, a, "must be a valid IP address")}
	}
	var errs field.ErrorList
	if addressType == discoveryv1.AddressTypeIPv4 && !ip.Is4() {
		errs = append(errs, field.Invalid(fld, a, "must be an IPv4 address"))
	}
	if addressType == discoveryv1.AddressTypeIPv6 && !ip.Is6() {
		errs = append(errs, field.Invalid(fld, a, "must be an IPv6 address"))
	}
	switch {
	case ip.IsUnspecified():
		errs = append(errs, field.Invalid(fld, a, fmt.Sprintf("may not be unspecified (%v)", a)))
	case ip.IsLoopback():
		errs = append(errs, field.Invalid(fld, a, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	case ip.IsLinkLocalUnicast():
		errs = append(errs, field.Invalid(fld, a, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	case ip.IsLinkLocalMulticast():
		errs = append(errs, field.Invalid(fld, a, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return errs
}

func validateHints(h *discoveryv1.EndpointHints, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	zp := fld.Child("forZones")
	if n := len(h.ForZones); n > maxZoneHints {
		errs = append(errs, field.TooMany(zp, n, maxZoneHints))
	} else {
		seen := make(map[string]bool)
		for i, z := range h.ForZones {
			p := zp.Index(i).Child("name")
			if seen[z.Name] {
				errs = append(errs, field.Duplicate(p, z.Name))
			}
			seen[z.Name] = true
			for _, msg := range content.IsLabelValue(z.Name) {
				errs = append(errs, field.Invalid(p, z.Name, msg))
			}
		}
	}
	np := fld.Child("forNodes")
	if n := len(h.ForNodes); n > maxNodeHints {
		errs = append(errs, field.TooMany(np, n, maxNodeHints))
	} else {
		seen := make(map[string]bool)
		for i, nd := range h.ForNodes {
			p := np.Index(i).Child("name")
			if seen[nd.Name] {
				errs = append(errs, field.Duplicate(p, nd.Name))
			}
			seen[nd.Name] = true
			for _, msg := range apivalidation.NameIsDNSSubdomain(nd.Name, false) {
				errs = append(errs, field.Invalid(p, nd.Name, msg))
			}
		}
	}
	return errs
}

func validatePorts(ports []discoveryv1.EndpointPort, fld *field.Path) field.ErrorList {
	if len(ports) > maxPorts {
		return field.ErrorList{field.TooMany(fld, len(ports), maxPorts)}
	}
	var errs field.ErrorList
	names := make(map[string]bool)
	for i, port := range ports {
		p := fld.Index(i)
		var name string
		if port.Name != nil {
			name = *port.Name
		}
		if name != "" {
			for _, msg := range validation.IsDNS1123Label(name) {
				errs = append(errs, field.Invalid(p.Child("name"), name, msg))
			}
		}
		if names[name] {
			errs = append(errs, field.Duplicate(p.Child("name"), name))
		}
		names[name] = true
		switch {
		case port.Protocol == nil:
			errs = append(errs, field.Required(p.Child("protocol"), ""))
		case *port.Protocol != corev1.ProtocolTCP && *port.Protocol != corev1.ProtocolUDP && *port.Protocol != corev1.ProtocolSCTP:
			errs = append(errs, field.NotSupported(p.Child("protocol"), *port.Protocol, []corev1.Protocol{
				corev1.ProtocolSCTP, corev1.ProtocolTCP, corev1.ProtocolUDP}))
		}
		if ap := port.AppProtocol; ap != nil {
			for _, msg := range content.IsLabelKey(*ap) {
				errs = append(errs, field.Invalid(p.Child("appProtocol"), *ap, msg))
			}
		}
	}
	return errs
}

func endpointSliceColumns() []metav1.TableColumnDefinition {
	doc := discoveryv1.EndpointSlice{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
		{Name: "AddressType", Type: "string", Description: doc["addressType"]},
		{Name: "Ports", Type: "string", Description: doc["ports"]},
		{Name: "Endpoints", Type: "string", Description: doc["endpoints"]},
		{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	}
}

func endpointSliceRow(s *discoveryv1.EndpointSlice, now time.Time) []interface{} {
	var ports, addresses []string
	for _, p := range s.Ports {
		switch {
		case p.Port != nil:
			ports = append(ports, strconv.Itoa(int(*p.Port)))
		case p.Name != nil:
			ports = append(ports, *p.Name)
		default:
			ports = append(ports, "*")
		}
	}
	for _, ep := range s.Endpoints {
		addresses = append(addresses, ep.Addresses...)
	}
	age := "<unknown>"
	if !s.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(now.Sub(s.CreationTimestamp.Time))
	}
	return []interface{}{s.Name, string(s.AddressType), firstThree(ports), firstThree(addresses), age}
}

// firstThree lists at most three of items, saying how many more there
// are, or "<unset>" for none, as kubectl shows a slice's ports and
// endpoints.
func firstThree(items []string) string {
	switch n := len(items); {
	case n == 0:
		return "<unset>"
	case n > 3:
		return fmt.Sprintf("%s + %d more...", strings.Join(items[:3], ","), n-3)
	default:
		return strings.Join(items, ",")
	}
}
