package core

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// LimitRanges and ResourceQuotas: the policy objects admission enforces.

func limitRangeResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "LimitRange",
		Plural:       "limitranges",
		Singular:     "limitrange",
		ShortNames:   []string{"limits"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.LimitRange{} },
		NewList:      func() runtime.Object { return &corev1.LimitRangeList{} },
		AddToScheme:  corev1.AddToScheme,
		Rules: &typed.Rules[*corev1.LimitRange]{
			Now:      now,
			Defaults: defaultLimitRange,
			Check:    validateLimitRange,
			CheckUpdate: func(lr, old *corev1.LimitRange) field.ErrorList {
				return append(validateObjectMetaUpdate(&lr.ObjectMeta, &old.ObjectMeta), validateLimitRange(lr)...)
			},
			CreateOnUpdate: true,
			// Upstream has no printer for limit ranges: the server's
			// default table applies, with the creation time in RFC 3339.
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Created At", Type: "date", Description: objectMetaDoc["creationTimestamp"]},
			},
			TableRow: func(lr *corev1.LimitRange, _ time.Time) []interface{} {
				return []interface{}{lr.Name, lr.CreationTimestamp.UTC().Format(time.RFC3339)}
			},
		},
	}
}

// defaultLimitRange fills a Container item's defaults: the default limit
// from max, the default request from the default limit, else from min.
func defaultLimitRange(lr *corev1.LimitRange) {
	for i := range lr.Spec.Limits {
		item := &lr.Spec.Limits[i]
		for _, l := range []corev1.ResourceList{item.Max, item.Min, item.Default, item.DefaultRequest, item.MaxLimitRequestRatio} {
			roundResources(l)
		}
		if item.Type != corev1.LimitTypeContainer {
			continue
		}
		if item.Default == nil {
			item.Default = corev1.ResourceList{}
		}
		if item.DefaultRequest == nil {
			item.DefaultRequest = corev1.ResourceList{}
		}
		for name, q := range item.Max {
			if _, ok := item.Default[name]; !ok {
				item.Default[name] = q.DeepCopy()
			}
		}
		for name, q := range item.Default {
			if _, ok := item.DefaultRequest[name]; !ok {
				item.DefaultRequest[name] = q.DeepCopy()
			}
		}
		for name, q := range item.Min {
			if _, ok := item.DefaultRequest[name]; !ok {
				item.DefaultRequest[name] = q.DeepCopy()
			}
		}
	}
}

var standardLimitTypes = map[corev1.LimitType]bool{
	corev1.LimitTypePod:                   true,
	corev1.LimitTypeContainer:             true,
	corev1.LimitTypePersistentVolumeClaim: true,
}

func validateLimitRange(lr *corev1.LimitRange) field.ErrorList {
	errs := validateObjectMeta(&lr.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	limitsPath := specPath.Child("limits")
	types := map[corev1.LimitType]bool{}
	for i := range lr.Spec.Limits {
		item := &lr.Spec.Limits[i]
		p := limitsPath.Index(i)
		typeErrs := validateQualifiedName(string(item.Type), p.Child("type"))
		if len(typeErrs) == 0 && !strings.Contains(string(item.Type), "/") && !standardLimitTypes[item.Type] {
			typeErrs = append(typeErrs, field.Invalid(p.Child("type"), item.Type, "must be a standard limit type or fully qualified"))
		}
		errs = append(errs, typeErrs...)
		if types[item.Type] {
			errs = append(errs, field.Duplicate(p.Child("type"), item.Type))
		}
		types[item.Type] = true

		nameFn := validateResourceName
		if item.Type == corev1.LimitTypePod || item.Type == corev1.LimitTypeContainer {
			nameFn = validateContainerResourceName
		}
		keys := sets.New[corev1.ResourceName]()
		check := func(list corev1.ResourceList, child string) {
			for _, name := range sortedResourceNames(list) {
				errs = append(errs, nameFn(name, p.Child(child).Key(string(name)))...)
				keys.Insert(name)
			}
		}
		check(item.Max, "max")
		check(item.Min, "min")
		if item.Type == corev1.LimitTypePod {
			if len(item.Default) > 0 {
				errs = append(errs, field.Forbidden(p.Child("default"), "may not be specified when `type` is 'Pod'"))
			}
			if len(item.DefaultRequest) > 0 {
				errs = append(errs, field.Forbidden(p.Child("defaultRequest"), "may not be specified when `type` is 'Pod'"))
			}
		} else {
			check(item.Default, "default")
			check(item.DefaultRequest, "defaultRequest")
		}
		if item.Type == corev1.LimitTypePersistentVolumeClaim {
			_, hasMin := item.Min[corev1.ResourceStorage]
			_, hasMax := item.Max[corev1.ResourceStorage]
			if !hasMin && !hasMax {
				errs = append(errs, field.Required(p.Child("limits"), "either minimum or maximum storage value is required, but neither was provided"))
			}
		}
		check(item.MaxLimitRequestRatio, "maxLimitRequestRatio")

		for _, k := range sets.List(keys) {
			minQ, hasMin := item.Min[k]
			maxQ, hasMax := item.Max[k]
			def, hasDef := item.Default[k]
			defReq, hasDefReq := item.DefaultRequest[k]
			ratio, hasRatio := item.MaxLimitRequestRatio[k]
			key := string(k)
			if hasMin && hasMax && minQ.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(p.Child("min").Key(key), minQ, fmt.Sprintf("min value %s is greater than max value %s", minQ.String(), maxQ.String())))
			}
			if hasDefReq && hasMin && minQ.Cmp(defReq) > 0 {
				errs = append(errs, field.Invalid(p.Child("defaultRequest").Key(key), defReq, fmt.Sprintf("min value %s is greater than default request value %s", minQ.String(), defReq.String())))
			}
			if hasDefReq && hasMax && defReq.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(p.Child("defaultRequest").Key(key), defReq, fmt.Sprintf("default request value %s is greater than max value %s", defReq.String(), maxQ.String())))
			}
			if hasDefReq && hasDef && defReq.Cmp(def) > 0 {
				errs = append(errs, field.Invalid(p.Child("defaultRequest").Key(key), defReq, fmt.Sprintf("default request value %s is greater than default limit value %s", defReq.String(), def.String())))
			}
			if hasDef && hasMin && minQ.Cmp(def) > 0 {
				errs = append(errs, field.Invalid(p.Child("default").Key(key), minQ, fmt.Sprintf("min value %s is greater than default value %s", minQ.String(), def.String())))
			}
			if hasDef && hasMax && def.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(p.Child("default").Key(key), maxQ, fmt.Sprintf("default value %s is greater than max value %s", def.String(), maxQ.String())))
			}
			if hasRatio && ratio.Cmp(*resource.NewQuantity(1, resource.DecimalSI)) < 0 {
				errs = append(errs, field.Invalid(p.Child("maxLimitRequestRatio").Key(key), ratio, fmt.Sprintf("ratio %s is less than 1", ratio.String())))
			}
			if hasRatio && hasMin && hasMax && minQ.Sign() > 0 {
				limit := float64(maxQ.MilliValue()) / float64(minQ.MilliValue())
				if float64(ratio.MilliValue())/1000 > limit {
					errs = append(errs, field.Invalid(p.Child("maxLimitRequestRatio").Key(key), ratio, fmt.Sprintf("ratio %s is greater than max/min = %f", ratio.String(), limit)))
				}
			}
			if !isOvercommitAllowed(k) && hasDef && hasDefReq && def.Cmp(defReq) != 0 {
				errs = append(errs, field.Invalid(p.Child("defaultRequest").Key(key), defReq, fmt.Sprintf("default value %s must equal to defaultRequest value %s in %s", def.String(), defReq.String(), key)))
			}
		}
	}
	return errs
}

func resourceQuotaResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "ResourceQuota",
		Plural:       "resourcequotas",
		Singular:     "resourcequota",
		ShortNames:   []string{"quota"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.ResourceQuota{} },
		NewList:      func() runtime.Object { return &corev1.ResourceQuotaList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Rules: &typed.Rules[*corev1.ResourceQuota]{
			Now: now,
			Defaults: func(q *corev1.ResourceQuota) {
				roundResources(q.Spec.Hard)
				roundResources(q.Status.Hard)
				roundResources(q.Status.Used)
			},
			PrepareCreate: func(q *corev1.ResourceQuota) { q.Status = corev1.ResourceQuotaStatus{} },
			PrepareUpdate: func(q, old *corev1.ResourceQuota) { q.Status = old.Status },
			Check:         validateResourceQuota,
			CheckUpdate:   validateResourceQuotaUpdate,
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Request", Type: "string", Description: "Request represents a minimum amount of cpu/memory that a container may consume."},
				{Name: "Limit", Type: "string", Description: "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."},
				ageColumn,
			},
			TableRow: resourceQuotaRow,
			CheckStatus: func(q, old *corev1.ResourceQuota) field.ErrorList {
				errs := validateObjectMetaUpdate(&q.ObjectMeta, &old.ObjectMeta)
				return append(errs, validateQuotaStatus(&q.Status)...)
			},
		},
	}
}

func validateResourceQuota(q *corev1.ResourceQuota) field.ErrorList {
	errs := validateObjectMeta(&q.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	errs = append(errs, validateQuotaSpec(&q.Spec)...)
	return append(errs, validateQuotaStatus(&q.Status)...)
}

// validateResourceQuotaUpdate also keeps the scopes, which decide what
// the quota counts.
func validateResourceQuotaUpdate(q, old *corev1.ResourceQuota) field.ErrorList {
	errs := validateObjectMetaUpdate(&q.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateQuotaSpec(&q.Spec)...)
	scopes, oldScopes := sets.New[corev1.ResourceQuotaScope](), sets.New[corev1.ResourceQuotaScope]()
	scopes.Insert(q.Spec.Scopes...)
	oldScopes.Insert(old.Spec.Scopes...)
	if !scopes.Equal(oldScopes) {
		errs = append(errs, field.Invalid(specPath.Child("scopes"), q.Spec.Scopes, fieldImmutableErrorMsg))
	}
	return errs
}

func validateQuotaList(list corev1.ResourceList, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sortedResourceNames(list) {
		p := fldPath.Key(string(name))
		errs = append(errs, validateQuotaResourceName(name, p)...)
		errs = append(errs, validateQuantity(name, list[name], p)...)
	}
	return errs
}

func validateQuotaStatus(s *corev1.ResourceQuotaStatus) field.ErrorList {
	errs := validateQuotaList(s.Hard, field.NewPath("status", "hard"))
	return append(errs, validateQuotaList(s.Used, field.NewPath("status", "used"))...)
}

var (
	podComputeQuotaResources = sets.New(corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceLimitsCPU,
		corev1.ResourceLimitsMemory, corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory)
	standardQuotaScopes = sets.New(corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
		corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopePriorityClass,
		corev1.ResourceQuotaScopeCrossNamespacePodAffinity, corev1.ResourceQuotaScopeVolumeAttributesClass)
	conflictingScopes = [][2]corev1.ResourceQuotaScope{
		{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort},
		{corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating},
	}
)

// scopeValidFor reports whether a quota with scope may limit resource.
func scopeValidFor(scope corev1.ResourceQuotaScope, name corev1.ResourceName) bool {
	switch scope {
	case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeNotBestEffort,
		corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return name == corev1.ResourcePods || podComputeQuotaResources.Has(name)
	case corev1.ResourceQuotaScopeBestEffort:
		return name == corev1.ResourcePods
	case corev1.ResourceQuotaScopeVolumeAttributesClass:
		return name == corev1.ResourcePersistentVolumeClaims || name == corev1.ResourceRequestsStorage
	}
	return true
}

func validateQuotaSpec(spec *corev1.ResourceQuotaSpec) field.ErrorList {
	errs := validateQuotaList(spec.Hard, specPath.Child("hard"))
	hard := sortedResourceNames(spec.Hard)
	checkScope := func(scope corev1.ResourceQuotaScope, p *field.Path, bad interface{}) {
		if !standardQuotaScopes.Has(scope) {
			errs = append(errs, field.Invalid(p, bad, "unsupported scope"))
		}
		for _, name := range hard {
			if standardQuotaResources[name] && !scopeValidFor(scope, name) {
				errs = append(errs, field.Invalid(p, bad, "unsupported scope applied to resource"))
			}
		}
	}
	checkConflicts := func(scopes sets.Set[corev1.ResourceQuotaScope], p *field.Path) {
		for _, pair := range conflictingScopes {
			if scopes.HasAll(pair[0], pair[1]) {
				errs = append(errs, field.Invalid(p, spec.Scopes, "conflicting scopes"))
			}
		}
	}
	scopesPath := specPath.Child("scopes")
	for _, s := range spec.Scopes {
		checkScope(s, scopesPath, spec.Scopes)
	}
	checkConflicts(sets.New(spec.Scopes...), scopesPath)
	if sel := spec.ScopeSelector; sel != nil {
		p := specPath.Child("scopeSelector", "matchExpressions")
		scopes := sets.New[corev1.ResourceQuotaScope]()
		for _, req := range sel.MatchExpressions {
			checkScope(req.ScopeName, p.Child("scopeName"), req.ScopeName)
			switch req.ScopeName {
			case corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopeTerminating,
				corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
				if req.Operator != corev1.ScopeSelectorOpExists {
					errs = append(errs, field.Invalid(p.Child("operator"), req.Operator,
						"must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"))
				}
			}
			switch req.Operator {
			case corev1.ScopeSelectorOpIn, corev1.ScopeSelectorOpNotIn:
				if len(req.Values) == 0 {
					errs = append(errs, field.Required(p.Child("values"), "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"))
				}
			case corev1.ScopeSelectorOpExists, corev1.ScopeSelectorOpDoesNotExist:
				if len(req.Values) != 0 {
					errs = append(errs, field.Invalid(p.Child("values"), req.Values, "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector"))
				}
			default:
				errs = append(errs, field.Invalid(p.Child("operator"), req.Operator, "not a valid selector operator"))
			}
			scopes.Insert(req.ScopeName)
		}
		checkConflicts(scopes, p)
	}
	return errs
}

// resourceQuotaRow lists used/hard per resource, limits.* in LIMIT and
// everything else in REQUEST.
func resourceQuotaRow(q *corev1.ResourceQuota, now time.Time) []interface{} {
	names := make([]string, 0, len(q.Status.Hard))
	for name := range q.Status.Hard {
		names = append(names, string(name))
	}
	sort.Strings(names)
	var request, limit []string
	for _, name := range names {
		used := q.Status.Used[corev1.ResourceName(name)]
		hard := q.Status.Hard[corev1.ResourceName(name)]
		cell := fmt.Sprintf("%s: %s/%s", name, used.String(), hard.String())
		if prefix, _, ok := strings.Cut(name, "."); ok && prefix == "limits" {
			limit = append(limit, cell)
		} else {
			request = append(request, cell)
		}
	}
	return []interface{}{q.Name, strings.Join(request, ", "), strings.Join(limit, ", "), age(q.CreationTimestamp, now)}
}
