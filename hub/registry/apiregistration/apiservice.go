// Package apiregistration holds the hub's rules for the
// apiregistration.k8s.io/v1 resource apiservices (defaults, validation,
// status and printer columns, as upstream's kube-aggregator defines
// them) and the helpers that read and write an APIService's Available
// condition, which hub/aggregator keeps.
package apiregistration

import (
	"fmt"
	"strings"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/kube-aggregator/pkg/client/applyconfiguration"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Reasons of the Available condition that the hub itself writes on
// create; the availability controller writes the others.
const (
	// ReasonLocal marks an APIService the hub serves itself.
	ReasonLocal = "Local"
	// localMessage is upstream's message for a local APIService.
	localMessage = "Local APIServices are always available"
)

// Limits of the priorities, as upstream validates them.
const (
	maxGroupPriorityMinimum = 20000
	maxVersionPriority      = 1000
)

// Resources returns the apiregistration.k8s.io/v1 resources, with ages in
// printed tables and condition times measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages and condition times measured
// against now, or the wall clock if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	if now == nil {
		now = time.Now
	}
	return []apiserver.Resource{{
		GroupVersion: apiregistrationv1.SchemeGroupVersion,
		Kind:         "APIService",
		Plural:       "apiservices",
		Singular:     "apiservice",
		Categories:   []string{"api-extensions"},
		New:          func() runtime.Object { return &apiregistrationv1.APIService{} },
		NewList:      func() runtime.Object { return &apiregistrationv1.APIServiceList{} },
		AddToScheme:  apiregistrationv1.AddToScheme,
		Status:       true,
		// Upstream's status strategy keeps labels, annotations,
		// finalizers and owners.
		StatusKeepsMetadata: true,
		// The machinery's default is k8s.io/api's, which lacks
		// apiregistration's types.
		TypeConverter: typeConverter(),
		Rules:         apiServiceRules(now),
	}}
}

// typeConverter returns the schema server-side apply merges APIServices
// by, kube-aggregator's own. It panics if the scheme cannot hold the
// types, which the package's tests rule out.
func typeConverter() managedfields.TypeConverter {
	s := runtime.NewScheme()
	if err := apiregistrationv1.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("apiregistration: scheme: %v", err))
	}
	return applyconfiguration.NewTypeConverter(s)
}

// apiServiceRules are the rules of apiservices: cluster-scoped, with a
// status subresource, no field selectors beyond metadata's, and no
// create on PUT.
func apiServiceRules(now func() time.Time) *typed.Rules[*apiregistrationv1.APIService] {
	return &typed.Rules[*apiregistrationv1.APIService]{
		Now:           now,
		Defaults:      apiregistrationv1.SetObjectDefaults_APIService,
		PrepareCreate: func(s *apiregistrationv1.APIService) { prepareCreate(s, now()) },
		Check:         validateAPIService,
		CheckUpdate:   validateAPIServiceUpdate,
		PrepareStatus: prepareStatus,
		CheckStatus:   validateStatusUpdate,
		TableColumns:  columns(),
		TableRow:      row,
	}
}

// prepareCreate clears the status a client sent and, for a local
// APIService (no service), makes it Available at once, as upstream does:
// the hub serves the group version itself.
func prepareCreate(s *apiregistrationv1.APIService, now time.Time) {
	s.Status = apiregistrationv1.APIServiceStatus{}
	if s.Spec.Service == nil {
		SetAvailable(s, LocalAvailable(), now)
	}
}

// prepareStatus keeps, on a status update, what only an update of the
// main resource may change: spec, labels, annotations, finalizers and
// owners, as upstream's status strategy does.
func prepareStatus(s, old *apiregistrationv1.APIService) {
	s.Spec = old.Spec
	s.Labels = old.Labels
	s.Annotations = old.Annotations
	s.Finalizers = old.Finalizers
	s.OwnerReferences = old.OwnerReferences
}

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	servicePath  = specPath.Child("service")
)

// nameRule returns the name rule of s: a path segment, and exactly
// spec.version + "." + spec.group.
func nameRule(s *apiregistrationv1.APIService) apivalidation.ValidateNameFunc {
	required := s.Spec.Version + "." + s.Spec.Group
	return func(name string, prefix bool) []string {
		if errs := path.IsValidPathSegmentName(name); len(errs) > 0 {
			return errs
		}
		if name != required {
			return []string{fmt.Sprintf("must be `spec.version+\".\"+spec.group`: %q", required)}
		}
		return nil
	}
}

// validateAPIService checks a new APIService as upstream's
// ValidateAPIService does.
func validateAPIService(s *apiregistrationv1.APIService) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, false, nameRule(s), metadataPath)
	return append(errs, validateSpec(&s.Spec)...)
}

// validateSpec checks what an APIService's spec must hold: a group (empty
// only for the legacy v1) and version of valid names, priorities in
// range, and either no service and no TLS settings (local) or a service
// reference with at most one of caBundle and insecureSkipTLSVerify.
func validateSpec(spec *apiregistrationv1.APIServiceSpec) field.ErrorList {
	var errs field.ErrorList
	if spec.Group == "" && spec.Version != "v1" {
		errs = append(errs, field.Required(specPath.Child("group"), "only v1 may have an empty group and it better be legacy kube"))
	}
	if spec.Group != "" {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(spec.Group) {
			errs = append(errs, field.Invalid(specPath.Child("group"), spec.Group, msg))
		}
	}
	for _, msg := range utilvalidation.IsDNS1035Label(spec.Version) {
		errs = append(errs, field.Invalid(specPath.Child("version"), spec.Version, msg))
	}
	if spec.GroupPriorityMinimum <= 0 || spec.GroupPriorityMinimum > maxGroupPriorityMinimum {
		errs = append(errs, field.Invalid(specPath.Child("groupPriorityMinimum"), spec.GroupPriorityMinimum, "must be positive and less than 20000"))
	}
	if spec.VersionPriority <= 0 || spec.VersionPriority > maxVersionPriority {
		errs = append(errs, field.Invalid(specPath.Child("versionPriority"), spec.VersionPriority, "must be positive and less than 1000"))
	}
	if spec.Service == nil {
		if len(spec.CABundle) != 0 {
			errs = append(errs, field.Invalid(specPath.Child("caBundle"), fmt.Sprintf("%d bytes", len(spec.CABundle)), "local APIServices may not have a caBundle"))
		}
		if spec.InsecureSkipTLSVerify {
			errs = append(errs, field.Invalid(specPath.Child("insecureSkipTLSVerify"), spec.InsecureSkipTLSVerify, "local APIServices may not have insecureSkipTLSVerify"))
		}
		return errs
	}
	return append(errs, validateService(spec)...)
}

// validateService checks the service reference of a service-backed spec.
func validateService(spec *apiregistrationv1.APIServiceSpec) field.ErrorList {
	var errs field.ErrorList
	svc := spec.Service
	if svc.Namespace == "" {
		errs = append(errs, field.Required(servicePath.Child("namespace"), ""))
	}
	if svc.Name == "" {
		errs = append(errs, field.Required(servicePath.Child("name"), ""))
	}
	var port int32
	if svc.Port != nil {
		port = *svc.Port
	}
	if msgs := utilvalidation.IsValidPortNum(int(port)); msgs != nil {
		errs = append(errs, field.Invalid(servicePath.Child("port"), port, "port is not valid: "+strings.Join(msgs, ", ")))
	}
	if spec.InsecureSkipTLSVerify && len(spec.CABundle) > 0 {
		errs = append(errs, field.Invalid(specPath.Child("insecureSkipTLSVerify"), spec.InsecureSkipTLSVerify, "may not be true if caBundle is present"))
	}
	return errs
}

// validateAPIServiceUpdate checks an update as a new APIService, plus
// metadata's update rules.
func validateAPIServiceUpdate(s, old *apiregistrationv1.APIService) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&s.ObjectMeta, &old.ObjectMeta, metadataPath)
	return append(errs, validateAPIService(s)...)
}

// validateStatusUpdate checks a status update: metadata's update rules,
// and condition statuses True, False or Unknown.
func validateStatusUpdate(s, old *apiregistrationv1.APIService) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&s.ObjectMeta, &old.ObjectMeta, metadataPath)
	supported := []string{string(apiregistrationv1.ConditionTrue), string(apiregistrationv1.ConditionFalse), string(apiregistrationv1.ConditionUnknown)}
	for i, c := range s.Status.Conditions {
		switch c.Status {
		case apiregistrationv1.ConditionTrue, apiregistrationv1.ConditionFalse, apiregistrationv1.ConditionUnknown:
		default:
			errs = append(errs, field.NotSupported(field.NewPath("status", "conditions").Index(i).Child("status"), c.Status, supported))
		}
	}
	return errs
}

// columns are upstream's: NAME, SERVICE, AVAILABLE, AGE.
func columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Service", Type: "string", Description: "The reference to the service that hosts this API endpoint."},
		{Name: "Available", Type: "string", Description: "Whether this service is available."},
		typed.AgeColumn,
	}
}

// row prints s as upstream does: its service as namespace/name or Local,
// and its Available condition's status, with the reason when not True.
func row(s *apiregistrationv1.APIService, now time.Time) []interface{} {
	service := "Local"
	if s.Spec.Service != nil {
		service = s.Spec.Service.Namespace + "/" + s.Spec.Service.Name
	}
	available := string(apiregistrationv1.ConditionUnknown)
	if c := Available(s); c != nil {
		available = string(c.Status)
		if c.Status != apiregistrationv1.ConditionTrue && c.Reason != "" {
			available = fmt.Sprintf("%s (%s)", c.Status, c.Reason)
		}
	}
	return []interface{}{s.Name, service, available, typed.Age(now, s.CreationTimestamp)}
}
