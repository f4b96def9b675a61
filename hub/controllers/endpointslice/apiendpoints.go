package endpointslice

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The `kubernetes` service's endpoints, as kube-apiserver keeps them.
const (
	apiServiceName      = "kubernetes"
	apiServiceNamespace = metav1.NamespaceDefault
	apiPortName         = "https"
	// labelSkipMirror keeps upstream's mirroring controller off the
	// Endpoints, as kube-apiserver marks them.
	labelSkipMirror = discoveryv1.LabelSkipMirror
)

// ReconcileAPIEndpoints makes the Endpoints and the EndpointSlice of the
// `kubernetes` service in default point at the hub's API: address ip,
// port port (https, TCP), as kube-apiserver's endpoint reconciler does for
// a single server. It creates what is missing, rewrites what differs and
// leaves what is right untouched; call it at start and whenever the
// address changes.
func ReconcileAPIEndpoints(ctx context.Context, client kubernetes.Interface, ip netip.Addr, port int32) error {
	if !ip.IsValid() {
		return fmt.Errorf("kubernetes endpoints: invalid address")
	}
	ip = ip.Unmap()
	if err := reconcileAPIEndpoints(ctx, client, ip, port); err != nil {
		return fmt.Errorf("kubernetes endpoints: %w", err)
	}
	if err := reconcileAPISlice(ctx, client, ip, port); err != nil {
		return fmt.Errorf("kubernetes endpointslice: %w", err)
	}
	return nil
}

func reconcileAPIEndpoints(ctx context.Context, client kubernetes.Interface, ip netip.Addr, port int32) error {
	want := []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: ip.String()}},
		Ports:     []corev1.EndpointPort{{Name: apiPortName, Port: port, Protocol: corev1.ProtocolTCP}},
	}}
	api := client.CoreV1().Endpoints(apiServiceNamespace)
	cur, err := api.Get(ctx, apiServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: apiServiceName, Namespace: apiServiceNamespace, Labels: map[string]string{labelSkipMirror: "true"}},
			Subsets:    want,
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(cur.Subsets, want) && cur.Labels[labelSkipMirror] == "true" {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Subsets = want
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	upd.Labels[labelSkipMirror] = "true"
	_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
	return err
}

func reconcileAPISlice(ctx context.Context, client kubernetes.Interface, ip netip.Addr, port int32) error {
	at := discoveryv1.AddressTypeIPv4
	if ip.Is6() {
		at = discoveryv1.AddressTypeIPv6
	}
	want := discoveryv1.EndpointSlice{
		AddressType: at,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr(apiPortName), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	api := client.DiscoveryV1().EndpointSlices(apiServiceNamespace)
	cur, err := api.Get(ctx, apiServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s := want.DeepCopy()
		s.ObjectMeta = metav1.ObjectMeta{Name: apiServiceName, Namespace: apiServiceNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: apiServiceName}}
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if cur.AddressType != at {
		// The address type is immutable: replace the slice.
		if err := api.Delete(ctx, apiServiceName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return reconcileAPISlice(ctx, client, ip, port)
	}
	if equality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) && equality.Semantic.DeepEqual(cur.Ports, want.Ports) &&
		cur.Labels[discoveryv1.LabelServiceName] == apiServiceName {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Endpoints, upd.Ports = want.Endpoints, want.Ports
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	upd.Labels[discoveryv1.LabelServiceName] = apiServiceName
	_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
	return err
}
