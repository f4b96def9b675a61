package core

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

func endpointsResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "Endpoints",
		Plural:       "endpoints",
		Singular:     "endpoints",
		ShortNames:   []string{"ep"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.Endpoints{} },
		NewList:      func() runtime.Object { return &corev1.EndpointsList{} },
		AddToScheme:  corev1.AddToScheme,
		Rules: &typed.Rules[*corev1.Endpoints]{
			Now:      now,
			Defaults: defaultEndpoints,
			Check:    validateEndpoints,
			CheckUpdate: func(ep, old *corev1.Endpoints) field.ErrorList {
				return append(validateObjectMetaUpdate(&ep.ObjectMeta, &old.ObjectMeta), validateEndpoints(ep)...)
			},
			CreateOnUpdate: true,
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Endpoints", Type: "string", Description: corev1.Endpoints{}.SwaggerDoc()["subsets"]},
				ageColumn,
			},
			TableRow: func(ep *corev1.Endpoints, now time.Time) []interface{} {
				return []interface{}{ep.Name, formatEndpoints(ep), age(ep.CreationTimestamp, now)}
			},
		},
	}
}

func defaultEndpoints(ep *corev1.Endpoints) {
	for i := range ep.Subsets {
		for j := range ep.Subsets[i].Ports {
			if ep.Subsets[i].Ports[j].Protocol == "" {
				ep.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
}

func validateEndpoints(ep *corev1.Endpoints) field.ErrorList {
	errs := validateObjectMeta(&ep.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	subsetsPath := field.NewPath("subsets")
	for i, ss := range ep.Subsets {
		p := subsetsPath.Index(i)
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			errs = append(errs, field.Required(p, "must specify `addresses` or `notReadyAddresses`"))
		}
		for j := range ss.Addresses {
			errs = append(errs, validateEndpointAddress(&ss.Addresses[j], p.Child("addresses").Index(j))...)
		}
		for j := range ss.NotReadyAddresses {
			errs = append(errs, validateEndpointAddress(&ss.NotReadyAddresses[j], p.Child("notReadyAddresses").Index(j))...)
		}
		for j, port := range ss.Ports {
			pp := p.Child("ports").Index(j)
			if len(ss.Ports) > 1 && port.Name == "" {
				errs = append(errs, field.Required(pp.Child("name"), ""))
			} else if port.Name != "" {
				errs = append(errs, validateDNS1123Label(port.Name, pp.Child("name"))...)
			}
			errs = append(errs, validatePortNum(port.Port, pp.Child("port"))...)
			errs = append(errs, validateProtocol(port.Protocol, pp.Child("protocol"))...)
			if port.AppProtocol != nil {
				errs = append(errs, validateQualifiedName(*port.AppProtocol, pp.Child("appProtocol"))...)
			}
		}
	}
	return errs
}

func validateEndpointAddress(a *corev1.EndpointAddress, fldPath *field.Path) field.ErrorList {
	errs := validation.IsValidIP(fldPath.Child("ip"), a.IP)
	if a.Hostname != "" {
		errs = append(errs, validateDNS1123Label(a.Hostname, fldPath.Child("hostname"))...)
	}
	if a.NodeName != nil {
		errs = append(errs, validateName(*a.NodeName, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("nodeName"))...)
	}
	return append(errs, validateNonSpecialIP(a.IP, fldPath.Child("ip"))...)
}

// formatEndpoints is the ENDPOINTS cell: up to three ip:port pairs, then
// how many more there are.
func formatEndpoints(ep *corev1.Endpoints) string {
	if len(ep.Subsets) == 0 {
		return "<none>"
	}
	const max = 3
	var list []string
	more, count := false, 0
	for _, ss := range ep.Subsets {
		if len(ss.Ports) == 0 {
			// Headless services may have no ports.
			count += len(ss.Addresses)
			for _, a := range ss.Addresses {
				if len(list) == max {
					more = true
					break
				}
				list = append(list, a.IP)
			}
			continue
		}
		for _, port := range ss.Ports {
			count += len(ss.Addresses)
			for _, a := range ss.Addresses {
				if len(list) == max {
					more = true
					break
				}
				list = append(list, net.JoinHostPort(a.IP, strconv.Itoa(int(port.Port))))
			}
		}
	}
	s := strings.Join(list, ",")
	if more {
		return fmt.Sprintf("%s + %d more...", s, count-max)
	}
	return s
}
