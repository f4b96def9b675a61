package core

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

const (
	// labelNodeRolePrefix labels a node with a role: node-role.kubernetes.io/<role>="".
	labelNodeRolePrefix = "node-role.kubernetes.io/"
	// labelNodeRole is the older role label: kubernetes.io/role=<role>.
	labelNodeRole = "kubernetes.io/role"
)

func nodeResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "Node",
		Plural:       "nodes",
		Singular:     "node",
		ShortNames:   []string{"no"},
		New:          func() runtime.Object { return &corev1.Node{} },
		NewList:      func() runtime.Object { return &corev1.NodeList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Rules: &typed.Rules[*corev1.Node]{
			Now:      now,
			Defaults: defaultNode,
			// A node registers itself with its status, so create
			// keeps it; updates of the main resource do not change it.
			PrepareUpdate: func(n, old *corev1.Node) { n.Status = old.Status },
			Check:         validateNode,
			CheckUpdate:   validateNodeUpdate,
			FieldSet: func(n *corev1.Node) fields.Set {
				return fields.Set{"spec.unschedulable": strconv.FormatBool(n.Spec.Unschedulable)}
			},
			TableColumns: nodeColumns,
			TableRow:     nodeRow,
			CheckStatus:  validateNodeStatusUpdate,
		},
	}
}

// defaultNode makes allocatable default to capacity, and podCIDR and
// podCIDRs agree.
func defaultNode(n *corev1.Node) {
	syncPodCIDRs(&n.Spec)
	roundResources(n.Status.Capacity)
	roundResources(n.Status.Allocatable)
	if n.Status.Allocatable == nil && n.Status.Capacity != nil {
		n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	}
}

// PodCIDRs returns the pod CIDRs s assigns, as upstream reads a v1
// NodeSpec: upstream keeps podCIDRs only, and takes a client's podCIDR as
// the authority when it is set and podCIDRs is empty or starts elsewhere.
// The caller does not modify the slice returned.
func PodCIDRs(s *corev1.NodeSpec) []string {
	if s.PodCIDR != "" && (len(s.PodCIDRs) == 0 || s.PodCIDRs[0] != s.PodCIDR) {
		return []string{s.PodCIDR}
	}
	return s.PodCIDRs
}

// syncPodCIDRs makes spec.podCIDR and spec.podCIDRs say the same, as
// upstream's conversion through its internal type does: podCIDRs are
// PodCIDRs(s), and podCIDR is podCIDRs[0]. The rules on podCIDRs (valid
// CIDRs, set once) are then those on podCIDR too.
func syncPodCIDRs(s *corev1.NodeSpec) {
	s.PodCIDRs = PodCIDRs(s)
	s.PodCIDR = ""
	if len(s.PodCIDRs) > 0 {
		s.PodCIDR = s.PodCIDRs[0]
	}
}

func validateNode(n *corev1.Node) field.ErrorList {
	errs := validateObjectMeta(&n.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	errs = append(errs, validateNodeSpec(n)...)
	return append(errs, validateNodeResources(n)...)
}

// validateNodeSpec checks taints and pod CIDRs (one per family).
func validateNodeSpec(n *corev1.Node) field.ErrorList {
	errs := validateNodeTaints(n.Spec.Taints, specPath.Child("taints"))
	cidrsPath := specPath.Child("podCIDRs")
	for i, c := range n.Spec.PodCIDRs {
		errs = append(errs, validation.IsValidCIDR(cidrsPath.Index(i), c)...)
	}
	if len(n.Spec.PodCIDRs) > 1 {
		ips := make([]string, len(n.Spec.PodCIDRs))
		for i, c := range n.Spec.PodCIDRs {
			ips[i], _, _ = strings.Cut(c, "/")
		}
		if !isDualStack(ips) {
			errs = append(errs, field.Invalid(cidrsPath, n.Spec.PodCIDRs, "may specify no more than one CIDR for each IP family"))
		}
		seen := sets.New[string]()
		for i, c := range n.Spec.PodCIDRs {
			if seen.Has(c) {
				errs = append(errs, field.Duplicate(cidrsPath.Index(i), c))
			}
			seen.Insert(c)
		}
	}
	return errs
}

// validateNodeTaints checks taints, unique by key and effect. Upstream
// reports these under metadata.taints by mistake; they are in spec.
func validateNodeTaints(taints []corev1.Taint, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[corev1.TaintEffect]sets.Set[string]{}
	for i, t := range taints {
		p := fldPath.Index(i)
		errs = append(errs, metav1validation.ValidateLabelName(t.Key, p.Child("key"))...)
		if msgs := content.IsLabelValue(t.Value); len(msgs) != 0 {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, strings.Join(msgs, ";")))
		}
		errs = append(errs, validateTaintEffect(t.Effect, p.Child("effect"))...)
		if seen[t.Effect].Has(t.Key) {
			e := field.Duplicate(p, t)
			e.Detail = "taints must be unique by key and effect pair"
			errs = append(errs, e)
			continue
		}
		if seen[t.Effect] == nil {
			seen[t.Effect] = sets.New[string]()
		}
		seen[t.Effect].Insert(t.Key)
	}
	return errs
}

func validateNodeResources(n *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sortedResourceNames(n.Status.Capacity) {
		errs = append(errs, validateQuantity(name, n.Status.Capacity[name], field.NewPath("status", "capacity", string(name)))...)
	}
	for _, name := range sortedResourceNames(n.Status.Allocatable) {
		errs = append(errs, validateQuantity(name, n.Status.Allocatable[name], field.NewPath("status", "allocatable", string(name)))...)
	}
	return errs
}

// validateNodeUpdate lets podCIDRs and providerID be set once, and
// externalID never.
func validateNodeUpdate(n, old *corev1.Node) field.ErrorList {
	errs := validateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateNodeStatus(n)...)
	if len(old.Spec.PodCIDRs) > 0 && !sameStrings(old.Spec.PodCIDRs, n.Spec.PodCIDRs) {
		errs = append(errs, field.Forbidden(specPath.Child("podCIDRs"), `node updates may not change podCIDR except from "" to valid`))
	}
	if old.Spec.ProviderID != "" && old.Spec.ProviderID != n.Spec.ProviderID {
		errs = append(errs, field.Forbidden(specPath.Child("providerID"), `node updates may not change providerID except from "" to valid`))
	}
	if n.Spec.DoNotUseExternalID != old.Spec.DoNotUseExternalID {
		errs = append(errs, field.Forbidden(specPath.Child("externalID"), "may not be updated"))
	}
	return append(errs, validateNodeSpec(n)...)
}

// validateNodeStatus checks quantities and that no address repeats.
func validateNodeStatus(n *corev1.Node) field.ErrorList {
	errs := validateNodeResources(n)
	seen := map[corev1.NodeAddress]bool{}
	for i, a := range n.Status.Addresses {
		if seen[a] {
			errs = append(errs, field.Duplicate(field.NewPath("status", "addresses").Index(i), a))
		}
		seen[a] = true
	}
	return errs
}

func validateNodeStatusUpdate(n, old *corev1.Node) field.ErrorList {
	errs := validateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateNodeStatus(n)...)
}

var (
	nodeInfoDoc = corev1.NodeSystemInfo{}.SwaggerDoc()
	nodeColumns = []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Status", Type: "string", Description: "The status of the node"},
		{Name: "Roles", Type: "string", Description: "The roles of the node"},
		ageColumn,
		{Name: "Version", Type: "string", Description: nodeInfoDoc["kubeletVersion"]},
		{Name: "Internal-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "External-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "OS-Image", Type: "string", Priority: 1, Description: nodeInfoDoc["osImage"]},
		{Name: "Kernel-Version", Type: "string", Priority: 1, Description: nodeInfoDoc["kernelVersion"]},
		{Name: "Container-Runtime", Type: "string", Priority: 1, Description: nodeInfoDoc["containerRuntimeVersion"]},
	}
)

func nodeRow(n *corev1.Node, now time.Time) []interface{} {
	var status []string
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			status = []string{string(c.Type)}
		} else {
			status = []string{"Not" + string(c.Type)}
		}
	}
	if len(status) == 0 {
		status = append(status, "Unknown")
	}
	if n.Spec.Unschedulable {
		status = append(status, "SchedulingDisabled")
	}
	roles := sets.New[string]()
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, labelNodeRolePrefix):
			if role := strings.TrimPrefix(k, labelNodeRolePrefix); role != "" {
				roles.Insert(role)
			}
		case k == labelNodeRole && v != "":
			roles.Insert(v)
		}
	}
	rolesCell := strings.Join(sets.List(roles), ",")
	if rolesCell == "" {
		rolesCell = "<none>"
	}
	info := n.Status.NodeInfo
	return []interface{}{
		n.Name,
		strings.Join(status, ","),
		rolesCell,
		age(n.CreationTimestamp, now),
		info.KubeletVersion,
		nodeAddress(n, corev1.NodeInternalIP),
		nodeAddress(n, corev1.NodeExternalIP),
		orUnknown(info.OSImage),
		orUnknown(info.KernelVersion),
		orUnknown(info.ContainerRuntimeVersion),
	}
}

// nodeAddress returns the node's first address of type t, or "<none>".
func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}
