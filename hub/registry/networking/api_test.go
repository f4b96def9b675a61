package networking_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// tableColumns returns the names of the columns the hub serves for path
// as a Table, as kubectl get asks for it.
func tableColumns(t *testing.T, h *hubtest.Hub, path string) []string {
	t.Helper()
	tbl := typedtest.Table(t, h.Client.NetworkingV1().RESTClient(), path)
	names := typedtest.ColumnNames(tbl)
	if len(tbl.Rows) == 0 || len(tbl.Rows[0].Cells) != len(names) {
		t.Errorf("GET %s as a Table: rows %v, want cells for %q", path, tbl.Rows, names)
	}
	return names
}

func prefix() *networkingv1.PathType { return new(networkingv1.PathTypePrefix) }

// TestNetworkingAPI: the three kinds through a real hub and client-go:
// created with their defaults, refused with the field at fault, and
// printed with upstream's columns.
func TestNetworkingAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	c := h.Client.NetworkingV1()

	np, err := c.NetworkPolicies("default").Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromInt32(5432))}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create networkpolicy: %v", err)
	}
	if got := np.Spec.PolicyTypes; !reflect.DeepEqual(got, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) ||
		*np.Spec.Ingress[0].Ports[0].Protocol != corev1.ProtocolTCP || np.Generation != 1 {
		t.Errorf("created networkpolicy: policyTypes %v, protocol %v, generation %d; want [Ingress], TCP, 1",
			got, *np.Spec.Ingress[0].Ports[0].Protocol, np.Generation)
	}

	ic, err := c.IngressClasses().Create(ctx, &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec: networkingv1.IngressClassSpec{
			Controller: "k8s.io/ingress-nginx",
			Parameters: &networkingv1.IngressClassParametersReference{Kind: "ConfigMap", Name: "nginx-params"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ingressclass: %v", err)
	}
	if s := ic.Spec.Parameters.Scope; s == nil || *s != networkingv1.IngressClassParametersReferenceScopeCluster || ic.Namespace != "" {
		t.Errorf("created ingressclass: scope %v, namespace %q; want Cluster, none", s, ic.Namespace)
	}

	ing, err := c.Ingresses("default").Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "shop"},
		Spec: networkingv1.IngressSpec{
			IngressClassName: new("nginx"),
			Rules: []networkingv1.IngressRule{{Host: "shop.example.com", IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: prefix(),
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}},
			}}},
		},
		Status: networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{Ingress: []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.99"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ingress: %v", err)
	}
	if ing.Generation != 1 || len(ing.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("created ingress: generation %d, status %v; want 1 and the client's status dropped", ing.Generation, ing.Status)
	}
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.10"}}
	if ing, err = c.Ingresses("default").UpdateStatus(ctx, ing, metav1.UpdateOptions{}); err != nil || ing.Generation != 1 {
		t.Fatalf("update ingress status: generation %d, %v; want 1, nil", ing.Generation, err)
	}
	ing.Spec.Rules[0].Host = "www.example.com"
	if ing, err = c.Ingresses("default").Update(ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update ingress: %v", err)
	}
	if ing.Generation != 2 || len(ing.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("updated ingress: generation %d, status %v; want 2 and the controller's status kept", ing.Generation, ing.Status)
	}
	ing.Status.LoadBalancer.Ingress[0].Hostname = "192.0.2.11"
	_, err = c.Ingresses("default").UpdateStatus(ctx, ing, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "update ingress status with an IP for hostname", err); !slices.Contains(got, "status.loadBalancer.ingress[0].hostname") {
		t.Errorf("update ingress status with an IP for hostname: causes %v, want status.loadBalancer.ingress[0].hostname", got)
	}

	ic.Spec.Controller = "example.com/traefik"
	_, err = c.IngressClasses().Update(ctx, ic, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change an ingressclass's controller", err); !slices.Contains(got, "spec.controller") {
		t.Errorf("change an ingressclass's controller: causes %v, want spec.controller", got)
	}

	_, err = c.Ingresses("default").Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "no-path-type"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{IngressRuleValue: networkingv1.IngressRuleValue{
			HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/",
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}},
		}}}},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create an ingress without pathType", err); !slices.Contains(got, "spec.rules[0].http.paths[0].pathType") {
		t.Errorf("create an ingress without pathType: causes %v, want spec.rules[0].http.paths[0].pathType", got)
	}
	_, err = c.NetworkPolicies("default").Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "icmp"},
		Spec: networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: new(corev1.Protocol("ICMP"))}},
		}}},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create a networkpolicy for ICMP", err); !slices.Contains(got, "spec.egress[0].ports[0].protocol") {
		t.Errorf("create a networkpolicy for ICMP: causes %v, want spec.egress[0].ports[0].protocol", got)
	}

	for _, tt := range []struct {
		path string
		want []string
	}{
		{"/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", []string{"Name", "Pod-Selector", "Age"}},
		{"/apis/networking.k8s.io/v1/namespaces/default/ingresses/shop", []string{"Name", "Class", "Hosts", "Address", "Ports", "Age"}},
		{"/apis/networking.k8s.io/v1/ingressclasses", []string{"Name", "Controller", "Parameters", "Age"}},
	} {
		if got := tableColumns(t, h, tt.path); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("GET %s as a Table: columns %q, want %q", tt.path, got, tt.want)
		}
	}

	list, err := h.Client.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range list.APIResources {
		scope := "cluster"
		if r.Namespaced {
			scope = "namespaced"
		}
		got[r.Name] = fmt.Sprintf("%s %s %v", r.Kind, scope, r.ShortNames)
	}
	want := map[string]string{
		"networkpolicies":  "NetworkPolicy namespaced [netpol]",
		"ingresses":        "Ingress namespaced [ing]",
		"ingresses/status": "Ingress namespaced []",
		"ingressclasses":   "IngressClass cluster []",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("discovery of networking.k8s.io/v1 = %v, want %v", got, want)
	}
}
