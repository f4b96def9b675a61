// Package objects encodes and decodes the Kubernetes objects the edge agent
// holds in its view and sends to the hub: Kubernetes protobuf with a scheme
// of only the kinds that travel, to keep the edge binary small.
package objects

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		if err := corev1.AddToScheme(s); err != nil {
			panic(err)
		}
		if err := discoveryv1.AddToScheme(s); err != nil {
			panic(err)
		}
		return s
	}()
	pbSerializer = protobuf.NewSerializer(scheme, scheme)
)

// Decode decodes raw into into, setting its resourceVersion to rev
// (the hub strips it from the stored form).
func Decode(raw []byte, rev int64, into runtime.Object) error {
	if _, _, err := pbSerializer.Decode(raw, nil, into); err != nil {
		return fmt.Errorf("decode %T: %w", into, err)
	}
	if m, err := meta.Accessor(into); err == nil {
		m.SetResourceVersion(strconv.FormatInt(rev, 10))
	}
	return nil
}

// Encode encodes obj, whose apiVersion and kind must be set.
func Encode(obj runtime.Object) ([]byte, error) {
	var buf bytes.Buffer
	if err := pbSerializer.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("encode %T: %w", obj, err)
	}
	return buf.Bytes(), nil
}

// PodCIDR returns node n's IPv4 pod CIDR, the one netd serves: the first
// IPv4 one of spec.podCIDRs, else spec.podCIDR; ok false when the hub has
// assigned none or none parses.
func PodCIDR(n *corev1.Node) (cidr netip.Prefix, ok bool) {
	for _, c := range n.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
			return p, true
		}
	}
	if p, err := netip.ParsePrefix(n.Spec.PodCIDR); err == nil && p.Addr().Is4() {
		return p, true
	}
	return netip.Prefix{}, false
}
