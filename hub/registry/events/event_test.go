package events

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(10 * time.Minute)
	rules   = ResourcesWithClock(func() time.Time { return now })[0].Rules.(typed.All)
)

// event is one as client-go's events.k8s.io recorder writes it.
func event() *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "web-0.1829f3a4b5c6d7e8", Namespace: "default", ResourceVersion: "5", CreationTimestamp: metav1.NewTime(created)},
		EventTime:           metav1.NewMicroTime(created.Add(time.Minute)),
		ReportingController: "default-scheduler",
		ReportingInstance:   "default-scheduler-hub-1",
		Action:              "Binding",
		Reason:              "Scheduled",
		Regarding:           corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0", UID: "u1", APIVersion: "v1", ResourceVersion: "17"},
		Note:                "Successfully assigned default/web-0 to gateway-1 ",
		Type:                corev1.EventTypeNormal,
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*eventsv1.Event)
		want []string
	}{
		{"scheduled", func(*eventsv1.Event) {}, nil},
		{"series", func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(now)}
		}, nil},
		{"cluster-scoped object from default", func(e *eventsv1.Event) { e.Regarding.Namespace = "" }, nil},
		{"cluster-scoped object from elsewhere", func(e *eventsv1.Event) { e.Namespace, e.Regarding.Namespace = "edge", "" },
			[]string{"regarding.namespace: Invalid value"}},
		{"missing reporter and reason", func(e *eventsv1.Event) {
			e.ReportingController, e.ReportingInstance, e.Action, e.Reason = "", "", "", ""
		}, []string{"reportingController: Required value", "reportingController: Invalid value", "reportingController: Invalid value", "reportingInstance: Required value",
			"action: Required value", "reason: Required value"}},
		{"long note", func(e *eventsv1.Event) { e.Note = strings.Repeat("x", 1025) }, []string{"note: Invalid value"}},
		{"bad controller", func(e *eventsv1.Event) { e.ReportingController = "default scheduler" }, []string{"reportingController: Invalid value"}},
		{"no eventTime", func(e *eventsv1.Event) { e.EventTime = metav1.MicroTime{} }, []string{"eventTime: Required value"}},
		{"bad type", func(e *eventsv1.Event) { e.Type = "Info" }, []string{"type: Invalid value"}},
		{"short series", func(e *eventsv1.Event) { e.Series = &eventsv1.EventSeries{Count: 1} },
			[]string{"series.count: Invalid value", "series.lastObservedTime: Required value"}},
		{"deprecated fields", func(e *eventsv1.Event) {
			e.DeprecatedCount = 3
			e.DeprecatedSource = corev1.EventSource{Component: "kubelet"}
			e.DeprecatedFirstTimestamp = metav1.NewTime(created)
		}, []string{"deprecatedFirstTimestamp: Invalid value", "deprecatedCount: Invalid value", "deprecatedSource: Invalid value"}},
	}
	for _, tt := range tests {
		e := event()
		tt.edit(e)
		rules.Default(e)
		rules.PrepareForCreate(e)
		if got := typedtest.ErrStrings(rules.Validate(e)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("Validate(event with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateUpdate(t *testing.T) {
	old := event()
	tests := []struct {
		name string
		edit func(*eventsv1.Event)
		want []string
	}{
		{"repeat", func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(now)}
		}, nil},
		{"bad repeat", func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 0, LastObservedTime: metav1.NewMicroTime(now)}
		},
			[]string{"series.count: Invalid value"}},
		{"eventTime with nanoseconds", func(e *eventsv1.Event) { e.EventTime = metav1.NewMicroTime(e.EventTime.Add(300)) }, nil},
		{"what happened", func(e *eventsv1.Event) {
			e.Reason = "Preempted"
			e.Note = "other"
			e.Regarding.Name = "web-1"
			e.Type = corev1.EventTypeWarning
			e.EventTime = metav1.NewMicroTime(now)
		}, []string{"regarding: Invalid value", "reason: Invalid value", "note: Invalid value", "type: Invalid value", "eventTime: Invalid value"}},
	}
	for _, tt := range tests {
		e := old.DeepCopy()
		tt.edit(e)
		rules.PrepareForUpdate(e, old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(e, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(event %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestFields(t *testing.T) {
	want := fields.Set{
		"regarding.kind": "Pod", "regarding.namespace": "default", "regarding.name": "web-0", "regarding.uid": "u1",
		"regarding.apiVersion": "v1", "regarding.resourceVersion": "17", "regarding.fieldPath": "",
		"reason": "Scheduled", "reportingController": "default-scheduler", "type": "Normal",
	}
	if got := rules.Fields(event()); !reflect.DeepEqual(got, want) {
		t.Errorf("Fields = %v, want %v", got, want)
	}
}

func TestRow(t *testing.T) {
	series := event()
	series.Series = &eventsv1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(now.Add(-30 * time.Second))}

	legacy := event()
	legacy.EventTime = metav1.MicroTime{}
	legacy.DeprecatedFirstTimestamp = metav1.NewTime(created)
	legacy.DeprecatedLastTimestamp = metav1.NewTime(created.Add(8 * time.Minute))
	legacy.DeprecatedCount = 3
	legacy.DeprecatedSource = corev1.EventSource{Component: "kubelet", Host: "gateway-1"}
	legacy.Regarding.FieldPath = "spec.containers{web}"
	legacy.Type = corev1.EventTypeWarning

	clusterScoped := event()
	clusterScoped.Regarding = corev1.ObjectReference{Kind: "Node"}
	clusterScoped.ReportingInstance = ""

	tests := []struct {
		name string
		obj  *eventsv1.Event
		want []interface{}
	}{
		{"single", event(), []interface{}{"9m", "Normal", "Scheduled", "pod/web-0", "", "default-scheduler, default-scheduler-hub-1",
			"Successfully assigned default/web-0 to gateway-1", "9m", int64(1), "web-0.1829f3a4b5c6d7e8"}},
		{"series", series, []interface{}{"30s", "Normal", "Scheduled", "pod/web-0", "", "default-scheduler, default-scheduler-hub-1",
			"Successfully assigned default/web-0 to gateway-1", "9m", int64(4), "web-0.1829f3a4b5c6d7e8"}},
		{"legacy", legacy, []interface{}{"2m", "Warning", "Scheduled", "pod/web-0", "spec.containers{web}", "kubelet, gateway-1",
			"Successfully assigned default/web-0 to gateway-1", "10m", int64(3), "web-0.1829f3a4b5c6d7e8"}},
		{"node without name", clusterScoped, []interface{}{"9m", "Normal", "Scheduled", "node", "", "default-scheduler",
			"Successfully assigned default/web-0 to gateway-1", "9m", int64(1), "web-0.1829f3a4b5c6d7e8"}},
	}
	for _, tt := range tests {
		if got := rules.Row(tt.obj); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Row(%s) = %#v, want %#v", tt.name, got, tt.want)
		}
	}
	var cols, wide []string
	for _, c := range rules.Columns() {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		} else {
			wide = append(wide, c.Name)
		}
	}
	if got, want := strings.Join(cols, ","), "Last Seen,Type,Reason,Object,Message"; got != want {
		t.Errorf("columns %s, want %s", got, want)
	}
	if got, want := strings.Join(wide, ","), "Subobject,Source,First Seen,Count,Name"; got != want {
		t.Errorf("wide columns %s, want %s", got, want)
	}
}

func TestResources(t *testing.T) {
	r := Resources()
	if len(r) != 1 {
		t.Fatalf("Resources() has %d resources", len(r))
	}
	e := r[0]
	if e.GroupVersion != eventsv1.SchemeGroupVersion || e.Plural != "events" || e.Singular != "event" || e.Kind != "Event" ||
		!e.Namespaced || !reflect.DeepEqual(e.ShortNames, []string{"ev"}) || len(e.Categories) > 0 || e.Status || e.Scale != nil ||
		!e.Rules.(typed.All).AllowCreateOnUpdate() {
		t.Errorf("events resource = %+v", e)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
