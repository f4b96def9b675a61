package flowcontrol

import (
	"fmt"
	"slices"
	"strings"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

const (
	// defaultMatchingPrecedence is a schema's precedence when unset.
	defaultMatchingPrecedence = 1000
	// maxMatchingPrecedence is the highest precedence a schema may have.
	maxMatchingPrecedence = 10000
)

func flowSchemaRules(now func() time.Time) *typed.Rules[*flowcontrolv1.FlowSchema] {
	return &typed.Rules[*flowcontrolv1.FlowSchema]{
		Now: now,
		Defaults: func(fs *flowcontrolv1.FlowSchema) {
			if fs.Spec.MatchingPrecedence == 0 {
				fs.Spec.MatchingPrecedence = defaultMatchingPrecedence
			}
		},
		PrepareCreate: func(fs *flowcontrolv1.FlowSchema) { fs.Status = flowcontrolv1.FlowSchemaStatus{} },
		PrepareUpdate: func(fs, old *flowcontrolv1.FlowSchema) { fs.Status = old.Status },
		Check:         validateFlowSchema,
		// Upstream checks an update as a create: nothing is immutable.
		CheckUpdate: func(fs, old *flowcontrolv1.FlowSchema) field.ErrorList {
			errs := apivalidation.ValidateObjectMetaUpdate(&fs.ObjectMeta, &old.ObjectMeta, metadataPath)
			return append(errs, validateFlowSchema(fs)...)
		},
		CheckStatus: func(fs, old *flowcontrolv1.FlowSchema) field.ErrorList {
			errs := apivalidation.ValidateObjectMetaUpdate(&fs.ObjectMeta, &old.ObjectMeta, metadataPath)
			types := make([]string, len(fs.Status.Conditions))
			for i, c := range fs.Status.Conditions {
				types[i] = string(c.Type)
			}
			return append(errs, validateConditionTypes(types, statusPath.Child("conditions"))...)
		},
		TableColumns: flowSchemaColumns(),
		TableRow:     flowSchemaRow,
	}
}

var (
	supportedVerbs = sets.New("get", "list", "create", "update", "delete", "deletecollection", "patch", "watch", "proxy")
	// The kinds, distinguishers, enablements and limit responses upstream
	// knows, in the order its messages list them.
	supportedSubjectKinds   = []flowcontrolv1.SubjectKind{flowcontrolv1.SubjectKindGroup, flowcontrolv1.SubjectKindServiceAccount, flowcontrolv1.SubjectKindUser}
	supportedDistinguishers = []flowcontrolv1.FlowDistinguisherMethodType{flowcontrolv1.FlowDistinguisherMethodByNamespaceType, flowcontrolv1.FlowDistinguisherMethodByUserType}
)

func validateFlowSchema(fs *flowcontrolv1.FlowSchema) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&fs.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	errs = append(errs, validateFlowSchemaSpec(fs.Name, &fs.Spec, specPath)...)
	if mand := mandatorySchema(fs.Name); mand != nil && !apiequality.Semantic.DeepEqual(fs.Spec, mand.Spec) {
		errs = append(errs, field.Invalid(specPath, fs.Spec, fmt.Sprintf("spec of '%s' must equal the fixed value", fs.Name)))
	}
	return errs
}

func validateFlowSchemaSpec(name string, s *flowcontrolv1.FlowSchemaSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	p := fld.Child("matchingPrecedence")
	switch {
	case s.MatchingPrecedence <= 0:
		errs = append(errs, field.Invalid(p, s.MatchingPrecedence, "must be a positive value"))
	case s.MatchingPrecedence > maxMatchingPrecedence:
		errs = append(errs, field.Invalid(p, s.MatchingPrecedence, fmt.Sprintf("must not be greater than %v", maxMatchingPrecedence)))
	case s.MatchingPrecedence == 1 && name != flowcontrolv1.FlowSchemaNameExempt:
		errs = append(errs, field.Invalid(p, s.MatchingPrecedence, "only the schema named 'exempt' may have matchingPrecedence 1"))
	}
	if d := s.DistinguisherMethod; d != nil && !slices.Contains(supportedDistinguishers, d.Type) {
		errs = append(errs, field.NotSupported(fld.Child("distinguisherMethod", "type"), d.Type, supportedDistinguishers))
	}
	plPath := fld.Child("priorityLevelConfiguration", "name")
	if pl := s.PriorityLevelConfiguration.Name; pl == "" {
		errs = append(errs, field.Required(plPath, "must reference a priority level"))
	} else {
		for _, msg := range apivalidation.NameIsDNSSubdomain(pl, false) {
			errs = append(errs, field.Invalid(plPath, pl, msg))
		}
	}
	for i := range s.Rules {
		errs = append(errs, validateRules(&s.Rules[i], fld.Child("rules").Index(i))...)
	}
	return errs
}

func validateRules(r *flowcontrolv1.PolicyRulesWithSubjects, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Subjects) == 0 {
		errs = append(errs, field.Required(fld.Child("subjects"), "subjects must contain at least one value"))
	}
	for i := range r.Subjects {
		errs = append(errs, validateSubject(&r.Subjects[i], fld.Child("subjects").Index(i))...)
	}
	if len(r.ResourceRules) == 0 && len(r.NonResourceRules) == 0 {
		errs = append(errs, field.Required(fld, "at least one of resourceRules and nonResourceRules has to be non-empty"))
	}
	for i := range r.ResourceRules {
		errs = append(errs, validateResourceRule(&r.ResourceRules[i], fld.Child("resourceRules").Index(i))...)
	}
	for i := range r.NonResourceRules {
		errs = append(errs, validateNonResourceRule(&r.NonResourceRules[i], fld.Child("nonResourceRules").Index(i))...)
	}
	return errs
}

// validateSubject checks that a subject has exactly the member its kind
// names, and that member.
func validateSubject(s *flowcontrolv1.Subject, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	forbid := func(set bool, member, kind string) {
		if set {
			errs = append(errs, field.Forbidden(fld.Child(member), member+" is forbidden when subject kind is not '"+kind+"'"))
		}
	}
	switch s.Kind {
	case flowcontrolv1.SubjectKindServiceAccount:
		p := fld.Child("serviceAccount")
		if sa := s.ServiceAccount; sa == nil {
			errs = append(errs, field.Required(p, "serviceAccount is required when subject kind is 'ServiceAccount'"))
		} else {
			if sa.Name == "" {
				errs = append(errs, field.Required(p.Child("name"), ""))
			} else if sa.Name != flowcontrolv1.NameAll {
				for _, msg := range apivalidation.ValidateServiceAccountName(sa.Name, false) {
					errs = append(errs, field.Invalid(p.Child("name"), sa.Name, msg))
				}
			}
			if sa.Namespace == "" {
				errs = append(errs, field.Required(p.Child("namespace"), "must specify namespace for service account"))
			} else {
				for _, msg := range apivalidation.ValidateNamespaceName(sa.Namespace, false) {
					errs = append(errs, field.Invalid(p.Child("namespace"), sa.Namespace, msg))
				}
			}
		}
		forbid(s.User != nil, "user", "User")
		forbid(s.Group != nil, "group", "Group")
	case flowcontrolv1.SubjectKindUser:
		if s.User == nil {
			errs = append(errs, field.Required(fld.Child("user"), "user is required when subject kind is 'User'"))
		} else if s.User.Name == "" {
			errs = append(errs, field.Required(fld.Child("user", "name"), ""))
		}
		forbid(s.ServiceAccount != nil, "serviceAccount", "ServiceAccount")
		forbid(s.Group != nil, "group", "Group")
	case flowcontrolv1.SubjectKindGroup:
		if s.Group == nil {
			errs = append(errs, field.Required(fld.Child("group"), "group is required when subject kind is 'Group'"))
		} else if s.Group.Name == "" {
			errs = append(errs, field.Required(fld.Child("group", "name"), ""))
		}
		forbid(s.ServiceAccount != nil, "serviceAccount", "ServiceAccount")
		forbid(s.User != nil, "user", "User")
	default:
		errs = append(errs, field.NotSupported(fld.Child("kind"), s.Kind, supportedSubjectKinds))
	}
	return errs
}

// validateVerbs checks a rule's verbs: some, and either "*" alone or
// known verbs.
func validateVerbs(verbs []string, fld *field.Path) field.ErrorList {
	switch {
	case len(verbs) == 0:
		return field.ErrorList{field.Required(fld, "verbs must contain at least one value")}
	case slices.Contains(verbs, "*"):
		if len(verbs) > 1 {
			return field.ErrorList{field.Invalid(fld, verbs, "if '*' is present, must not specify other verbs")}
		}
	case !supportedVerbs.HasAll(verbs...):
		return field.ErrorList{field.NotSupported(fld, verbs, sets.List(supportedVerbs))}
	}
	return nil
}

// wildcardAlone reports a list at fld holding "*" and more; what names
// the list's members in the message.
func wildcardAlone(list []string, what string, fld *field.Path) field.ErrorList {
	if len(list) > 1 && slices.Contains(list, "*") {
		return field.ErrorList{field.Invalid(fld, list, "if '*' is present, must not specify other "+what)}
	}
	return nil
}

func validateResourceRule(r *flowcontrolv1.ResourcePolicyRule, fld *field.Path) field.ErrorList {
	errs := validateVerbs(r.Verbs, fld.Child("verbs"))
	if len(r.APIGroups) == 0 {
		errs = append(errs, field.Required(fld.Child("apiGroups"), "resource rules must supply at least one api group"))
	}
	errs = append(errs, wildcardAlone(r.APIGroups, "api groups", fld.Child("apiGroups"))...)
	if len(r.Resources) == 0 {
		errs = append(errs, field.Required(fld.Child("resources"), "resource rules must supply at least one resource"))
	}
	errs = append(errs, wildcardAlone(r.Resources, "resources", fld.Child("resources"))...)
	nsPath := fld.Child("namespaces")
	switch {
	case len(r.Namespaces) == 0 && !r.ClusterScope:
		errs = append(errs, field.Required(nsPath, "resource rules that are not cluster scoped must supply at least one namespace"))
	case slices.Contains(r.Namespaces, "*"):
		errs = append(errs, wildcardAlone(r.Namespaces, "namespaces", nsPath)...)
	default:
		for i, ns := range r.Namespaces {
			for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
				errs = append(errs, field.Invalid(nsPath.Index(i), ns, "each member of this list must be '*' or a DNS-1123 label; "+msg))
			}
		}
	}
	return errs
}

func validateNonResourceRule(r *flowcontrolv1.NonResourcePolicyRule, fld *field.Path) field.ErrorList {
	errs := validateVerbs(r.Verbs, fld.Child("verbs"))
	p := fld.Child("nonResourceURLs")
	switch {
	case len(r.NonResourceURLs) == 0:
		errs = append(errs, field.Required(p, "nonResourceURLs must contain at least one value"))
	case slices.Contains(r.NonResourceURLs, "*"):
		errs = append(errs, wildcardAlone(r.NonResourceURLs, "non-resource URLs", p)...)
	default:
		for i, u := range r.NonResourceURLs {
			if msg := nonResourceURLProblem(u); msg != "" {
				errs = append(errs, field.Invalid(p.Index(i), u, msg))
			}
		}
	}
	return errs
}

// nonResourceURLProblem says what is wrong with a non-resource URL path,
// or "": it starts with a slash, has no white space or double slash, and
// a wildcard only as its last element.
func nonResourceURLProblem(u string) string {
	switch {
	case u == "":
		return "must not be empty"
	case u == "/":
		return ""
	case !strings.HasPrefix(u, "/"):
		return "must start with slash"
	case strings.Contains(u, " "):
		return "must not contain white-space"
	case strings.Contains(u, "//"):
		return "must not contain double slash"
	}
	if n := strings.Count(u, "*"); n > 1 || n == 1 && !strings.HasSuffix(u, "/*") {
		return "wildcard can only do suffix matching"
	}
	return ""
}

// validateConditionTypes checks a status's condition types: set, and
// each once.
func validateConditionTypes(types []string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, t := range types {
		if seen.Has(t) {
			errs = append(errs, field.Duplicate(fld.Index(i).Child("type"), t))
		}
		seen.Insert(t)
		if t == "" {
			errs = append(errs, field.Required(fld.Index(i).Child("type"), "must not be empty"))
		}
	}
	return errs
}

func flowSchemaColumns() []metav1.TableColumnDefinition {
	spec := flowcontrolv1.FlowSchemaSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "PriorityLevel", Type: "string", Description: flowcontrolv1.PriorityLevelConfigurationReference{}.SwaggerDoc()["name"]},
		{Name: "MatchingPrecedence", Type: "string", Description: spec["matchingPrecedence"]},
		{Name: "DistinguisherMethod", Type: "string", Description: spec["distinguisherMethod"]},
		typed.AgeColumn,
		{Name: "MissingPL", Type: "string", Description: "references a broken or non-existent PriorityLevelConfiguration"},
	}
}

// flowSchemaRow shows in MISSINGPL the schema's Dangling condition, or
// "?" without one.
func flowSchemaRow(fs *flowcontrolv1.FlowSchema, now time.Time) []interface{} {
	method := "<none>"
	if d := fs.Spec.DistinguisherMethod; d != nil {
		method = string(d.Type)
	}
	missing := "?"
	for _, c := range fs.Status.Conditions {
		if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
			missing = string(c.Status)
			break
		}
	}
	return []interface{}{fs.Name, fs.Spec.PriorityLevelConfiguration.Name, int64(fs.Spec.MatchingPrecedence), method,
		typed.Age(now, fs.CreationTimestamp), missing}
}
