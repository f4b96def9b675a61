// Package scheduling holds the hub's rules for the scheduling.k8s.io/v1
// resource priorityclasses (their default, validation and printer
// columns, as upstream Kubernetes defines them) and the two system
// classes every cluster has, which the hub creates at start.
package scheduling

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Priorities and names of the system classes, as upstream's.
const (
	// HighestUserDefinablePriority is the highest value a class other
	// than the system ones may have.
	HighestUserDefinablePriority = int32(1000000000)
	// SystemCriticalPriority is the value of system-cluster-critical;
	// system-node-critical is 1000 higher.
	SystemCriticalPriority = 2 * HighestUserDefinablePriority

	SystemClusterCritical = "system-cluster-critical"
	SystemNodeCritical    = "system-node-critical"

	// systemPrefix starts the names reserved for the system classes.
	systemPrefix = "system-"
)

// SystemPriorityClasses returns the system priority classes, new objects
// the caller owns, with their TypeMeta set for apiserver.Server.Ensure.
// Validation accepts a class named system-* only if it is one of these,
// exactly.
func SystemPriorityClasses() []*schedulingv1.PriorityClass {
	typeMeta := metav1.TypeMeta{APIVersion: schedulingv1.SchemeGroupVersion.String(), Kind: "PriorityClass"}
	return []*schedulingv1.PriorityClass{
		{
			TypeMeta:    typeMeta,
			ObjectMeta:  metav1.ObjectMeta{Name: SystemNodeCritical},
			Value:       SystemCriticalPriority + 1000,
			Description: "Used for system critical pods that must not be moved from their current node.",
		},
		{
			TypeMeta:    typeMeta,
			ObjectMeta:  metav1.ObjectMeta{Name: SystemClusterCritical},
			Value:       SystemCriticalPriority,
			Description: "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
		},
	}
}

// Resources returns the scheduling.k8s.io/v1 resources, with ages in
// printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil.
//
// Upstream sets a class's generation to 1 and never moves it; here it
// counts changes like any resource's, which for a class whose value and
// preemptionPolicy are immutable means changes of description and
// globalDefault.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: schedulingv1.SchemeGroupVersion,
		Kind:         "PriorityClass",
		Plural:       "priorityclasses",
		Singular:     "priorityclass",
		ShortNames:   []string{"pc"},
		New:          func() runtime.Object { return &schedulingv1.PriorityClass{} },
		NewList:      func() runtime.Object { return &schedulingv1.PriorityClassList{} },
		AddToScheme:  schedulingv1.AddToScheme,
		Generation:   true,
		Rules:        priorityClassRules(now),
	}}
}

// priorityClassRules are the rules of priorityclasses, with ages measured
// against now (nil is the wall clock). A priorityclass is cluster-scoped,
// has no status and no field selectors beyond metadata's, and a PUT does
// not create one.
//
// Upstream allows one class with globalDefault, and enforces it in its
// Priority admission plugin, not in validation; the hub runs no such
// plugin, so several classes may claim it here, and pods get no priority
// from a default class either way.
func priorityClassRules(now func() time.Time) *typed.Rules[*schedulingv1.PriorityClass] {
	return &typed.Rules[*schedulingv1.PriorityClass]{
		Now:          now,
		Defaults:     defaultPriorityClass,
		Check:        validatePriorityClass,
		CheckUpdate:  validatePriorityClassUpdate,
		TableColumns: priorityClassColumns(),
		TableRow:     priorityClassRow,
	}
}

// defaultPriorityClass sets preemptionPolicy PreemptLowerPriority when
// unset, as upstream does.
func defaultPriorityClass(pc *schedulingv1.PriorityClass) {
	if pc.PreemptionPolicy == nil {
		pc.PreemptionPolicy = new(corev1.PreemptLowerPriority)
	}
}

var (
	metadataPath         = field.NewPath("metadata")
	valuePath            = field.NewPath("value")
	preemptionPolicyPath = field.NewPath("preemptionPolicy")
)

func validatePriorityClass(pc *schedulingv1.PriorityClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&pc.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	if strings.HasPrefix(pc.Name, systemPrefix) {
		if err := checkSystemClass(pc); err != nil {
			errs = append(errs, field.Forbidden(metadataPath.Child("name"),
				"priority class names with '"+systemPrefix+"' prefix are reserved for system use only. error: "+err.Error()))
		}
	} else if pc.Value > HighestUserDefinablePriority {
		errs = append(errs, field.Forbidden(valuePath, fmt.Sprintf("maximum allowed value of a user defined priority is %v", HighestUserDefinablePriority)))
	}
	if p := pc.PreemptionPolicy; p != nil && *p != corev1.PreemptLowerPriority && *p != corev1.PreemptNever {
		errs = append(errs, field.NotSupported(preemptionPolicyPath, *p, []corev1.PreemptionPolicy{corev1.PreemptLowerPriority, corev1.PreemptNever}))
	}
	return errs
}

// checkSystemClass returns nil if pc is one of the system classes, with
// its value and globalDefault, or why not.
func checkSystemClass(pc *schedulingv1.PriorityClass) error {
	for _, sys := range SystemPriorityClasses() {
		if sys.Name != pc.Name {
			continue
		}
		if sys.Value != pc.Value {
			return fmt.Errorf("value of %v PriorityClass must be %v", sys.Name, sys.Value)
		}
		if sys.GlobalDefault != pc.GlobalDefault {
			return fmt.Errorf("globalDefault of %v PriorityClass must be %v", sys.Name, sys.GlobalDefault)
		}
		return nil
	}
	return fmt.Errorf("%v is not a known system priority class", pc.Name)
}

// validatePriorityClassUpdate checks an update of class old to pc: value
// and preemptionPolicy may not change, as pods already carry them.
func validatePriorityClassUpdate(pc, old *schedulingv1.PriorityClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&pc.ObjectMeta, &old.ObjectMeta, metadataPath)
	if pc.Value != old.Value {
		errs = append(errs, field.Forbidden(valuePath, "may not be changed in an update."))
	}
	return append(errs, apivalidation.ValidateImmutableField(pc.PreemptionPolicy, old.PreemptionPolicy, preemptionPolicyPath)...)
}

func priorityClassColumns() []metav1.TableColumnDefinition {
	doc := schedulingv1.PriorityClass{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Value", Type: "integer", Description: doc["value"]},
		{Name: "Global-Default", Type: "boolean", Description: doc["globalDefault"]},
		typed.AgeColumn,
		{Name: "PreemptionPolicy", Type: "string", Description: doc["preemptionPolicy"]},
	}
}

func priorityClassRow(pc *schedulingv1.PriorityClass, now time.Time) []interface{} {
	var policy string
	if pc.PreemptionPolicy != nil {
		policy = string(*pc.PreemptionPolicy)
	}
	return []interface{}{pc.Name, int64(pc.Value), pc.GlobalDefault, typed.Age(now, pc.CreationTimestamp), policy}
}
