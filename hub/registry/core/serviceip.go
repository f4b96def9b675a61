package core

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// ServiceCIDR is the range cluster IPs are allocated from, upstream's
// default. Its first address after the network address (10.96.0.1) is the
// `kubernetes` service's.
var ServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")

// serviceRules are the service rules plus cluster IP allocation.
type serviceRules struct {
	statusRules[*corev1.Service]
}

var _ apiserver.Allocator = serviceRules{}

// Held returns the cluster IPs a service holds.
func (serviceRules) Held(obj runtime.Object) []string {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	var ips []string
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			ips = append(ips, ip)
		}
	}
	return ips
}

// Assign gives a service without a cluster IP a free one from ServiceCIDR,
// starting at a random offset as upstream does, and reserves one given by
// the client (422 when another service holds it). Headless and
// ExternalName services get none.
func (r serviceRules) Assign(obj runtime.Object, reserve func(string) (bool, error)) error {
	svc, ok := obj.(*corev1.Service)
	if !ok || svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil
	}
	if ip := svc.Spec.ClusterIP; ip != "" {
		ok, err := reserve(ip)
		if err != nil {
			return err
		}
		if !ok {
			return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, field.ErrorList{
				field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), ip, "provided IP is already allocated")})
		}
		return nil
	}
	base := ServiceCIDR.Masked().Addr().As4()
	start := binary.BigEndian.Uint32(base[:])
	size := uint32(1) << (32 - ServiceCIDR.Bits())
	// Skip the network address, .1 (the kubernetes service's, given
	// explicitly) and the broadcast address.
	span := size - 3
	off := rand.Uint32N(span)
	for i := uint32(0); i < span; i++ {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], start+2+(off+i)%span)
		ip := netip.AddrFrom4(b).String()
		ok, err := reserve(ip)
		if err != nil {
			return err
		}
		if ok {
			svc.Spec.ClusterIP = ip
			svc.Spec.ClusterIPs = []string{ip}
			return nil
		}
	}
	return apierrors.NewInternalError(fmt.Errorf("no free cluster IP in %s", ServiceCIDR))
}
