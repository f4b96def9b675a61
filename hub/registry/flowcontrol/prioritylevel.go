package flowcontrol

import (
	"fmt"
	"math"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Defaults of a limited level, as upstream's v1 defaults.
const (
	defaultNominalConcurrencyShares = 30
	defaultQueues                   = 64
	defaultHandSize                 = 8
	defaultQueueLengthLimit         = 50
)

const (
	// maxQueues is the most queues a level may have.
	maxQueues = 10 * 1000 * 1000
	// maxHashBits is the entropy shuffle sharding draws a hand from.
	maxHashBits = 60
)

func priorityLevelRules(now func() time.Time) *typed.Rules[*flowcontrolv1.PriorityLevelConfiguration] {
	return &typed.Rules[*flowcontrolv1.PriorityLevelConfiguration]{
		Now:      now,
		Defaults: defaultPriorityLevel,
		PrepareCreate: func(pl *flowcontrolv1.PriorityLevelConfiguration) {
			pl.Status = flowcontrolv1.PriorityLevelConfigurationStatus{}
		},
		PrepareUpdate: func(pl, old *flowcontrolv1.PriorityLevelConfiguration) { pl.Status = old.Status },
		Check:         validatePriorityLevel,
		// Upstream checks an update as a create: nothing is immutable.
		CheckUpdate: func(pl, old *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
			errs := apivalidation.ValidateObjectMetaUpdate(&pl.ObjectMeta, &old.ObjectMeta, metadataPath)
			return append(errs, validatePriorityLevel(pl)...)
		},
		CheckStatus: func(pl, old *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
			errs := apivalidation.ValidateObjectMetaUpdate(&pl.ObjectMeta, &old.ObjectMeta, metadataPath)
			types := make([]string, len(pl.Status.Conditions))
			for i, c := range pl.Status.Conditions {
				types[i] = string(c.Type)
			}
			return append(errs, validateConditionTypes(types, statusPath.Child("conditions"))...)
		},
		TableColumns: priorityLevelColumns(),
		TableRow:     priorityLevelRow,
	}
}

// defaultPriorityLevel applies upstream's v1 defaults: an exempt level's
// shares and lendable percent 0; a limited level's shares 30, lendable
// percent 0, and its queuing 64 queues, hands of 8, 50 requests a queue.
func defaultPriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) {
	s := &pl.Spec
	if s.Type == flowcontrolv1.PriorityLevelEnablementExempt && s.Exempt == nil {
		s.Exempt = &flowcontrolv1.ExemptPriorityLevelConfiguration{}
	}
	if e := s.Exempt; e != nil {
		if e.NominalConcurrencyShares == nil {
			e.NominalConcurrencyShares = new(int32(0))
		}
		if e.LendablePercent == nil {
			e.LendablePercent = new(int32(0))
		}
	}
	if l := s.Limited; l != nil {
		if l.NominalConcurrencyShares == nil {
			l.NominalConcurrencyShares = new(int32(defaultNominalConcurrencyShares))
		}
		if l.LendablePercent == nil {
			l.LendablePercent = new(int32(0))
		}
		if q := l.LimitResponse.Queuing; q != nil {
			if q.Queues == 0 {
				q.Queues = defaultQueues
			}
			if q.HandSize == 0 {
				q.HandSize = defaultHandSize
			}
			if q.QueueLengthLimit == 0 {
				q.QueueLengthLimit = defaultQueueLengthLimit
			}
		}
	}
}

var (
	supportedEnablements    = []flowcontrolv1.PriorityLevelEnablement{flowcontrolv1.PriorityLevelEnablementExempt, flowcontrolv1.PriorityLevelEnablementLimited}
	supportedLimitResponses = []flowcontrolv1.LimitResponseType{flowcontrolv1.LimitResponseTypeQueue, flowcontrolv1.LimitResponseTypeReject}
)

// validatePriorityLevel checks a level as upstream: exempt is the one
// Exempt level, and may change only its exempt settings; catch-all is
// held to its bootstrap spec.
func validatePriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&pl.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	errs = append(errs, validatePriorityLevelSpec(pl.Name, &pl.Spec, specPath)...)
	if mand := mandatoryLevel(pl.Name); mand != nil {
		spec := pl.Spec
		if pl.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt {
			spec.Exempt = mand.Spec.Exempt
		}
		if !apiequality.Semantic.DeepEqual(spec, mand.Spec) {
			errs = append(errs, field.Invalid(specPath, pl.Spec, fmt.Sprintf("spec of '%s' must equal the fixed value", pl.Name)))
		}
	}
	return errs
}

func validatePriorityLevelSpec(name string, s *flowcontrolv1.PriorityLevelConfigurationSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if (name == flowcontrolv1.PriorityLevelConfigurationNameExempt) != (s.Type == flowcontrolv1.PriorityLevelEnablementExempt) {
		errs = append(errs, field.Invalid(fld.Child("type"), s.Type, "type must be 'Exempt' if and only if name is 'exempt'"))
	}
	switch s.Type {
	case flowcontrolv1.PriorityLevelEnablementExempt:
		if s.Limited != nil {
			errs = append(errs, field.Forbidden(fld.Child("limited"), "must be nil if the type is not Limited"))
		}
		if e := s.Exempt; e != nil {
			p := fld.Child("exempt")
			if n := e.NominalConcurrencyShares; n != nil && *n < 0 {
				errs = append(errs, field.Invalid(p.Child("nominalConcurrencyShares"), *n, "must be a non-negative integer"))
			}
			errs = append(errs, validatePercent(e.LendablePercent, p.Child("lendablePercent"))...)
		}
	case flowcontrolv1.PriorityLevelEnablementLimited:
		if s.Exempt != nil {
			errs = append(errs, field.Forbidden(fld.Child("exempt"), "must be nil if the type is Limited"))
		}
		if s.Limited == nil {
			errs = append(errs, field.Required(fld.Child("limited"), "must not be empty when type is Limited"))
		} else {
			errs = append(errs, validateLimited(s.Limited, fld.Child("limited"))...)
		}
	default:
		errs = append(errs, field.NotSupported(fld.Child("type"), s.Type, supportedEnablements))
	}
	return errs
}

// validatePercent checks an optional percentage: 0 to 100.
func validatePercent(v *int32, fld *field.Path) field.ErrorList {
	if v != nil && (*v < 0 || *v > 100) {
		return field.ErrorList{field.Invalid(fld, *v, "must be between 0 and 100, inclusive")}
	}
	return nil
}

// validateLimited checks a limited level: shares not negative (v1 allows
// zero), percentages in range, and a limit response that fits its type.
func validateLimited(l *flowcontrolv1.LimitedPriorityLevelConfiguration, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if n := l.NominalConcurrencyShares; n != nil && *n < 0 {
		errs = append(errs, field.Invalid(fld.Child("nominalConcurrencyShares"), *n, "must be a non-negative integer"))
	}
	errs = append(errs, validatePercent(l.LendablePercent, fld.Child("lendablePercent"))...)
	if b := l.BorrowingLimitPercent; b != nil && *b < 0 {
		errs = append(errs, field.Invalid(fld.Child("borrowingLimitPercent"), *b, "if specified, must be a non-negative integer"))
	}
	lr := fld.Child("limitResponse")
	switch q := l.LimitResponse.Queuing; l.LimitResponse.Type {
	case flowcontrolv1.LimitResponseTypeReject:
		if q != nil {
			errs = append(errs, field.Forbidden(lr.Child("queuing"), "must be nil if limited.limitResponse.type is not Limited"))
		}
	case flowcontrolv1.LimitResponseTypeQueue:
		if q == nil {
			errs = append(errs, field.Required(lr.Child("queuing"), "must not be empty if limited.limitResponse.type is Limited"))
		} else {
			errs = append(errs, validateQueuing(q, lr.Child("queuing"))...)
		}
	default:
		errs = append(errs, field.NotSupported(lr.Child("type"), l.LimitResponse.Type, supportedLimitResponses))
	}
	return errs
}

// validateQueuing checks queuing for shuffle sharding: positive counts,
// hands no bigger than the deck, and a hand drawable from 60 bits.
func validateQueuing(q *flowcontrolv1.QueuingConfiguration, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.QueueLengthLimit <= 0 {
		errs = append(errs, field.Invalid(fld.Child("queueLengthLimit"), q.QueueLengthLimit, "must be positive"))
	}
	switch {
	case q.Queues <= 0:
		errs = append(errs, field.Invalid(fld.Child("queues"), q.Queues, "must be positive"))
	case q.Queues > maxQueues:
		errs = append(errs, field.Invalid(fld.Child("queues"), q.Queues, fmt.Sprintf("must not be greater than %d", maxQueues)))
	}
	hand := fld.Child("handSize")
	switch {
	case q.HandSize <= 0:
		errs = append(errs, field.Invalid(hand, q.HandSize, "must be positive"))
	case q.HandSize > q.Queues:
		errs = append(errs, field.Invalid(hand, q.HandSize, fmt.Sprintf("should not be greater than queues (%d)", q.Queues)))
	case entropyBits(q.Queues, q.HandSize) > maxHashBits:
		errs = append(errs, field.Invalid(hand, q.HandSize,
			fmt.Sprintf("required entropy bits of deckSize %d and handSize %d should not be greater than %d", q.Queues, q.HandSize, maxHashBits)))
	}
	return errs
}

// entropyBits is the number of random bits that dealing a hand of
// handSize from deckSize cards takes, as upstream's shuffle sharding
// counts them.
func entropyBits(deckSize, handSize int32) int {
	if deckSize <= 0 || handSize <= 0 {
		return 0
	}
	return int(math.Ceil(math.Log2(float64(deckSize)) * float64(handSize)))
}

func priorityLevelColumns() []metav1.TableColumnDefinition {
	queuing := flowcontrolv1.QueuingConfiguration{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Type", Type: "string", Description: flowcontrolv1.PriorityLevelConfigurationSpec{}.SwaggerDoc()["type"]},
		{Name: "NominalConcurrencyShares", Type: "string", Description: flowcontrolv1.LimitedPriorityLevelConfiguration{}.SwaggerDoc()["nominalConcurrencyShares"]},
		{Name: "Queues", Type: "string", Description: queuing["queues"]},
		{Name: "HandSize", Type: "string", Description: queuing["handSize"]},
		{Name: "QueueLengthLimit", Type: "string", Description: queuing["queueLengthLimit"]},
		typed.AgeColumn,
	}
}

// priorityLevelRow shows "<none>" for what a level's type lacks.
func priorityLevelRow(pl *flowcontrolv1.PriorityLevelConfiguration, now time.Time) []interface{} {
	var shares, queues, hand, limit interface{} = "<none>", "<none>", "<none>", "<none>"
	if l := pl.Spec.Limited; l != nil {
		if l.NominalConcurrencyShares != nil {
			shares = int64(*l.NominalConcurrencyShares)
		}
		if q := l.LimitResponse.Queuing; q != nil {
			queues, hand, limit = int64(q.Queues), int64(q.HandSize), int64(q.QueueLengthLimit)
		}
	}
	return []interface{}{pl.Name, string(pl.Spec.Type), shares, queues, hand, limit, typed.Age(now, pl.CreationTimestamp)}
}
