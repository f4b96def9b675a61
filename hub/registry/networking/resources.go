package networking

import (
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Resources returns the networking.k8s.io/v1 resources, with ages in
// printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil. Tests use it to get stable Table rows.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	gv := networkingv1.SchemeGroupVersion
	return []apiserver.Resource{
		{
			GroupVersion: gv,
			Kind:         "NetworkPolicy",
			Plural:       "networkpolicies",
			Singular:     "networkpolicy",
			ShortNames:   []string{"netpol"},
			Namespaced:   true,
			New:          func() runtime.Object { return &networkingv1.NetworkPolicy{} },
			NewList:      func() runtime.Object { return &networkingv1.NetworkPolicyList{} },
			AddToScheme:  networkingv1.AddToScheme,
			Generation:   true,
			Rules:        networkPolicyRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "Ingress",
			Plural:       "ingresses",
			Singular:     "ingress",
			ShortNames:   []string{"ing"},
			Namespaced:   true,
			New:          func() runtime.Object { return &networkingv1.Ingress{} },
			NewList:      func() runtime.Object { return &networkingv1.IngressList{} },
			AddToScheme:  networkingv1.AddToScheme,
			Status:       true,
			Generation:   true,
			Rules:        ingressRules(now),
		},
		{
			GroupVersion: gv,
			Kind:         "IngressClass",
			Plural:       "ingressclasses",
			Singular:     "ingressclass",
			New:          func() runtime.Object { return &networkingv1.IngressClass{} },
			NewList:      func() runtime.Object { return &networkingv1.IngressClassList{} },
			AddToScheme:  networkingv1.AddToScheme,
			Generation:   true,
			Rules:        ingressClassRules(now),
		},
	}
}

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
)
