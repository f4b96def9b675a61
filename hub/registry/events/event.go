// Package events holds the hub's rules for the events.k8s.io/v1 resource
// events: their validation, field selectors and printer columns, as
// upstream Kubernetes defines them.
//
// Upstream stores core/v1 and events.k8s.io/v1 events once and converts
// between the two shapes, so an event written through one API reads back
// through the other. The hub serves the two as separate resources with
// separate storage (core/v1 events are hub/registry/core's): `kubectl get
// events` and `kubectl describe` read core/v1 and do not show events
// written through events.k8s.io/v1, such as those of client-go's
// tools/events recorder, and `kubectl get events.events.k8s.io` does not
// show core/v1 ones. Hub components whose events users should see in
// kubectl record them through core/v1 (client-go's tools/record).
package events

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Length limits of an event's fields, as upstream's.
const (
	maxReportingInstanceLength = 128
	maxActionLength            = 128
	maxReasonLength            = 128
	maxNoteLength              = 1024
)

// Resources returns the events.k8s.io/v1 resources, with ages in printed
// tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: eventsv1.SchemeGroupVersion,
		Kind:         "Event",
		Plural:       "events",
		Singular:     "event",
		ShortNames:   []string{"ev"},
		Namespaced:   true,
		New:          func() runtime.Object { return &eventsv1.Event{} },
		NewList:      func() runtime.Object { return &eventsv1.EventList{} },
		AddToScheme:  eventsv1.AddToScheme,
		Rules:        eventRules(now),
	}}
}

// eventRules are the rules of events.k8s.io/v1 events, with ages measured
// against now (nil is the wall clock). An event has no defaults and
// nothing to clear; it may be created with a PUT, as upstream allows.
// Errors name the fields as events.k8s.io/v1 does (regarding, note), where
// upstream names some as core/v1 does (involvedObject, message).
func eventRules(now func() time.Time) *typed.Rules[*eventsv1.Event] {
	return &typed.Rules[*eventsv1.Event]{
		Now:            now,
		Check:          validateEventCreate,
		CheckUpdate:    validateEventUpdate,
		CreateOnUpdate: true,
		FieldSet:       eventFields,
		TableColumns:   eventColumns(),
		TableRow:       eventRow,
	}
}

// validateEventCreate checks a new event as upstream does one created
// through events.k8s.io/v1: the checks every event passes, then the
// stricter ones of this API (eventTime and type set, deprecated fields
// unset).
func validateEventCreate(e *eventsv1.Event) field.ErrorList {
	errs := validateEvent(e)
	errs = append(errs, apivalidation.ValidateObjectMeta(&e.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, validateSeries(e)...)
	if e.EventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.Invalid(field.NewPath("type"), e.Type, fmt.Sprintf("has invalid value: %v", e.Type)))
	}
	for _, f := range []struct {
		name  string
		unset bool
	}{
		{"deprecatedFirstTimestamp", e.DeprecatedFirstTimestamp.IsZero()},
		{"deprecatedLastTimestamp", e.DeprecatedLastTimestamp.IsZero()},
		{"deprecatedCount", e.DeprecatedCount == 0},
		{"deprecatedSource", e.DeprecatedSource == corev1.EventSource{}},
	} {
		if !f.unset {
			errs = append(errs, field.Invalid(field.NewPath(f.name), "", "needs to be unset"))
		}
	}
	return errs
}

// validateEventUpdate checks an update as upstream does: the checks every
// event passes, a changed series, and what an event may not change: what
// it is about, what happened, when, and its deprecated fields.
func validateEventUpdate(e, o *eventsv1.Event) field.ErrorList {
	errs := validateEvent(e)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(&e.ObjectMeta, &o.ObjectMeta, field.NewPath("metadata"))...)
	if !reflect.DeepEqual(e.Series, o.Series) {
		errs = append(errs, validateSeries(e)...)
	}
	for _, f := range []struct {
		name     string
		new, old interface{}
	}{
		{"regarding", e.Regarding, o.Regarding},
		{"reason", e.Reason, o.Reason},
		{"note", e.Note, o.Note},
		{"deprecatedSource", e.DeprecatedSource, o.DeprecatedSource},
		{"deprecatedFirstTimestamp", e.DeprecatedFirstTimestamp, o.DeprecatedFirstTimestamp},
		{"deprecatedLastTimestamp", e.DeprecatedLastTimestamp, o.DeprecatedLastTimestamp},
		{"deprecatedCount", e.DeprecatedCount, o.DeprecatedCount},
		{"type", e.Type, o.Type},
		// Clients that serialize with nanoseconds may resend an eventTime
		// that differs below the microsecond the API keeps.
		{"eventTime", metav1.NewTime(e.EventTime.Truncate(time.Microsecond)), metav1.NewTime(o.EventTime.Truncate(time.Microsecond))},
	} {
		errs = append(errs, apivalidation.ValidateImmutableField(f.new, f.old, field.NewPath(f.name))...)
	}
	return errs
}

// validateEvent holds the checks upstream makes of every event, whatever
// API wrote it. An event with an eventTime is a new-style event and must
// say who reported it, what it did and why.
func validateEvent(e *eventsv1.Event) field.ErrorList {
	var errs field.ErrorList
	nsPath := field.NewPath("regarding", "namespace")
	if e.EventTime.IsZero() {
		switch ns := e.Regarding.Namespace; {
		case ns == "" && e.Namespace != metav1.NamespaceNone && e.Namespace != metav1.NamespaceDefault,
			ns != "" && ns != e.Namespace:
			errs = append(errs, field.Invalid(nsPath, ns, "does not match event.namespace"))
		}
		return errs
	}
	if e.Regarding.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
		errs = append(errs, field.Invalid(nsPath, e.Regarding.Namespace, "does not match event.namespace"))
	}
	rc := field.NewPath("reportingController")
	if e.ReportingController == "" {
		errs = append(errs, field.Required(rc, ""))
	}
	for _, msg := range content.IsLabelKey(e.ReportingController) {
		errs = append(errs, field.Invalid(rc, e.ReportingController, msg))
	}
	for _, f := range []struct {
		name     string
		value    string
		required bool
		max      int
	}{
		{"reportingInstance", e.ReportingInstance, true, maxReportingInstanceLength},
		{"action", e.Action, true, maxActionLength},
		{"reason", e.Reason, true, maxReasonLength},
		{"note", e.Note, false, maxNoteLength},
	} {
		p := field.NewPath(f.name)
		if f.required && f.value == "" {
			errs = append(errs, field.Required(p, ""))
		}
		if len(f.value) > f.max {
			errs = append(errs, field.Invalid(p, "", fmt.Sprintf("can have at most %d characters", f.max)))
		}
	}
	return errs
}

// validateSeries checks an event's series, if any: it counts repeats, so
// at least two, and says when the last was seen.
func validateSeries(e *eventsv1.Event) field.ErrorList {
	if e.Series == nil {
		return nil
	}
	var errs field.ErrorList
	if e.Series.Count < 2 {
		errs = append(errs, field.Invalid(field.NewPath("series", "count"), e.Series.Count, "should be at least 2"))
	}
	if e.Series.LastObservedTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("series", "lastObservedTime"), ""))
	}
	return errs
}

// eventFields returns the fields upstream selects events.k8s.io/v1 events
// by.
func eventFields(e *eventsv1.Event) fields.Set {
	r := &e.Regarding
	return fields.Set{
		"regarding.kind":            r.Kind,
		"regarding.namespace":       r.Namespace,
		"regarding.name":            r.Name,
		"regarding.uid":             string(r.UID),
		"regarding.apiVersion":      r.APIVersion,
		"regarding.resourceVersion": r.ResourceVersion,
		"regarding.fieldPath":       r.FieldPath,
		"reason":                    e.Reason,
		"reportingController":       e.ReportingController,
		"type":                      e.Type,
	}
}

// eventColumns are upstream's event columns. Unlike every other
// resource's, they do not start with the name: LAST SEEN comes first and
// NAME is shown only with -o wide.
func eventColumns() []metav1.TableColumnDefinition {
	doc := corev1.Event{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		{Name: "Last Seen", Type: "string", Description: doc["lastTimestamp"]},
		{Name: "Type", Type: "string", Description: doc["type"]},
		{Name: "Reason", Type: "string", Description: doc["reason"]},
		{Name: "Object", Type: "string", Description: doc["involvedObject"]},
		{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.ObjectReference{}.SwaggerDoc()["fieldPath"]},
		{Name: "Source", Type: "string", Priority: 1, Description: doc["source"]},
		{Name: "Message", Type: "string", Description: doc["message"]},
		{Name: "First Seen", Type: "string", Priority: 1, Description: doc["firstTimestamp"]},
		{Name: "Count", Type: "string", Priority: 1, Description: doc["count"]},
		{Name: "Name", Type: "string", Priority: 1, Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	}
}

func eventRow(e *eventsv1.Event, now time.Time) []interface{} {
	first := since(e.DeprecatedFirstTimestamp.Time, now)
	if e.DeprecatedFirstTimestamp.IsZero() {
		first = since(e.EventTime.Time, now)
	}
	last := since(e.DeprecatedLastTimestamp.Time, now)
	if e.DeprecatedLastTimestamp.IsZero() {
		last = first
	}
	count := e.DeprecatedCount
	switch {
	case e.Series != nil:
		last, count = since(e.Series.LastObservedTime.Time, now), e.Series.Count
	case count == 0:
		count = 1 // a single event carries no count
	}
	object := strings.ToLower(e.Regarding.Kind)
	if e.Regarding.Name != "" {
		object += "/" + e.Regarding.Name
	}
	return []interface{}{
		last,
		e.Type,
		e.Reason,
		object,
		e.Regarding.FieldPath,
		source(e),
		strings.TrimSpace(e.Note),
		first,
		int64(count),
		e.Name,
	}
}

// since is how long before now t was, or "<unknown>" for a zero time.
func since(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// source is the SOURCE column: the component that reported the event and
// its host or instance, as "component, instance".
func source(e *eventsv1.Event) string {
	component := firstNonEmpty(e.DeprecatedSource.Component, e.ReportingController)
	instance := firstNonEmpty(e.DeprecatedSource.Host, e.ReportingInstance)
	if instance == "" {
		return component
	}
	return component + ", " + instance
}

// firstNonEmpty returns the first of a and b that is not empty.
func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
