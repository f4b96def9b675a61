package core

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Events of the core/v1 API. Upstream checks them loosely for
// compatibility with old clients; so do these rules, and they also
// require the object the event is about.

const (
	reportingInstanceLengthLimit = 128
	actionLengthLimit            = 128
	reasonLengthLimit            = 128
	noteLengthLimit              = 1024
)

func eventResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "Event",
		Plural:       "events",
		Singular:     "event",
		ShortNames:   []string{"ev"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.Event{} },
		NewList:      func() runtime.Object { return &corev1.EventList{} },
		AddToScheme:  corev1.AddToScheme,
		Rules: &typed.Rules[*corev1.Event]{
			Now:   now,
			Check: validateEvent,
			CheckUpdate: func(e, old *corev1.Event) field.ErrorList {
				return append(validateObjectMetaUpdate(&e.ObjectMeta, &old.ObjectMeta), validateEvent(e)...)
			},
			CreateOnUpdate: true,
			FieldSet:       eventFields,
			TableColumns:   eventColumns,
			TableRow:       eventRow,
		},
	}
}

// validateEvent is upstream's legacy event validation, with the metadata
// checks the generic registry adds (names are path segments) and a
// required involvedObject.
func validateEvent(e *corev1.Event) field.ErrorList {
	errs := validateObjectMeta(&e.ObjectMeta, true, path.ValidatePathSegmentName)
	involvedNS := field.NewPath("involvedObject", "namespace")
	if e.InvolvedObject.Kind == "" && e.InvolvedObject.Name == "" {
		errs = append(errs, field.Required(field.NewPath("involvedObject"), ""))
	}
	if e.EventTime.IsZero() {
		// Old-style events: the namespaces must agree ("default" stands
		// for cluster-scoped objects with old clients).
		if e.InvolvedObject.Namespace == "" {
			if e.Namespace != metav1.NamespaceNone && e.Namespace != metav1.NamespaceDefault {
				errs = append(errs, field.Invalid(involvedNS, e.InvolvedObject.Namespace, "does not match event.namespace"))
			}
		} else if e.Namespace != e.InvolvedObject.Namespace {
			errs = append(errs, field.Invalid(involvedNS, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
	} else {
		if e.InvolvedObject.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
			errs = append(errs, field.Invalid(involvedNS, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
		rc := field.NewPath("reportingController")
		if e.ReportingController == "" {
			errs = append(errs, field.Required(rc, ""))
		}
		for _, msg := range content.IsQualifiedName(e.ReportingController) {
			errs = append(errs, field.Invalid(rc, e.ReportingController, msg))
		}
		errs = append(errs, validateEventString(e.ReportingInstance, "reportingInstance", reportingInstanceLengthLimit, true)...)
		errs = append(errs, validateEventString(e.Action, "action", actionLengthLimit, true)...)
		errs = append(errs, validateEventString(e.Reason, "reason", reasonLengthLimit, true)...)
		errs = append(errs, validateEventString(e.Message, "message", noteLengthLimit, false)...)
	}
	for _, msg := range validation.IsDNS1123Subdomain(e.Namespace) {
		errs = append(errs, field.Invalid(field.NewPath("namespace"), e.Namespace, msg))
	}
	return errs
}

func validateEventString(v, name string, limit int, required bool) field.ErrorList {
	p := field.NewPath(name)
	var errs field.ErrorList
	if required && v == "" {
		errs = append(errs, field.Required(p, ""))
	}
	if len(v) > limit {
		errs = append(errs, field.Invalid(p, "", fmt.Sprintf("can have at most %v characters", limit)))
	}
	return errs
}

func eventFields(e *corev1.Event) fields.Set {
	source := e.Source.Component
	if source == "" {
		source = e.ReportingController
	}
	return fields.Set{
		"involvedObject.kind":            e.InvolvedObject.Kind,
		"involvedObject.namespace":       e.InvolvedObject.Namespace,
		"involvedObject.name":            e.InvolvedObject.Name,
		"involvedObject.uid":             string(e.InvolvedObject.UID),
		"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
		"reason":                         e.Reason,
		"reportingComponent":             e.ReportingController,
		"source":                         source,
		"type":                           e.Type,
	}
}

var (
	eventDoc     = corev1.Event{}.SwaggerDoc()
	eventColumns = []metav1.TableColumnDefinition{
		{Name: "Last Seen", Type: "string", Description: eventDoc["lastTimestamp"]},
		{Name: "Type", Type: "string", Description: eventDoc["type"]},
		{Name: "Reason", Type: "string", Description: eventDoc["reason"]},
		{Name: "Object", Type: "string", Description: eventDoc["involvedObject"]},
		{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.ObjectReference{}.SwaggerDoc()["fieldPath"]},
		{Name: "Source", Type: "string", Priority: 1, Description: eventDoc["source"]},
		{Name: "Message", Type: "string", Description: eventDoc["message"]},
		{Name: "First Seen", Type: "string", Priority: 1, Description: eventDoc["firstTimestamp"]},
		{Name: "Count", Type: "string", Priority: 1, Description: eventDoc["count"]},
		{Name: "Name", Type: "string", Priority: 1, Format: "name", Description: objectMetaDoc["name"]},
	}
)

func eventRow(e *corev1.Event, now time.Time) []interface{} {
	first := age(e.FirstTimestamp, now)
	if e.FirstTimestamp.IsZero() {
		first = microAge(e.EventTime, now)
	}
	last := age(e.LastTimestamp, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = microAge(e.Series.LastObservedTime, now)
		count = e.Series.Count
	} else if count == 0 {
		// Singleton events of the events.k8s.io API have no count.
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component := e.Source.Component
	if component == "" {
		component = e.ReportingController
	}
	instance := e.Source.Host
	if instance == "" {
		instance = e.ReportingInstance
	}
	source := component
	if instance != "" {
		source += ", " + instance
	}
	return []interface{}{
		last,
		e.Type,
		e.Reason,
		target,
		e.InvolvedObject.FieldPath,
		source,
		strings.TrimSpace(e.Message),
		first,
		int64(count),
		e.Name,
	}
}
