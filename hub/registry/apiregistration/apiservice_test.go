package apiregistration

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(26 * time.Hour)
	rules   = ResourcesWithClock(func() time.Time { return now })[0].Rules.(typed.All)
)

// remote is a valid service-backed APIService, as metrics-server's.
func remote() *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(created)},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "metrics.k8s.io", Version: "v1beta1",
			Service:               &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"},
			InsecureSkipTLSVerify: true, GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}
}

func TestDefaults(t *testing.T) {
	s := remote()
	rules.Default(s)
	if s.Spec.Service.Port == nil || *s.Spec.Service.Port != 443 {
		t.Errorf("Default(service without port): port %v, want 443", s.Spec.Service.Port)
	}
}

func TestValidate(t *testing.T) {
	local := func(s *apiregistrationv1.APIService) {
		s.Spec.Service, s.Spec.InsecureSkipTLSVerify = nil, false
	}
	tests := []struct {
		name string
		edit func(*apiregistrationv1.APIService)
		want []string
	}{
		{"valid", func(*apiregistrationv1.APIService) {}, nil},
		{"local", local, nil},
		{"legacy v1", func(s *apiregistrationv1.APIService) {
			local(s)
			s.Name, s.Spec.Group, s.Spec.Version = "v1.", "", "v1"
		}, nil},
		{"name not version.group", func(s *apiregistrationv1.APIService) { s.Name = "metrics" }, []string{"metadata.name: Invalid value"}},
		{"name with a slash", func(s *apiregistrationv1.APIService) { s.Name = "v1/x" }, []string{"metadata.name: Invalid value"}},
		{"empty group, not v1", func(s *apiregistrationv1.APIService) { s.Name, s.Spec.Group = "v1beta1.", "" }, []string{"spec.group: Required value"}},
		{"bad group", func(s *apiregistrationv1.APIService) { s.Name, s.Spec.Group = "v1beta1.Metrics", "Metrics" }, []string{"spec.group: Invalid value"}},
		{"bad version", func(s *apiregistrationv1.APIService) { s.Name, s.Spec.Version = "1.metrics.k8s.io", "1" }, []string{"spec.version: Invalid value"}},
		{"group priority 0", func(s *apiregistrationv1.APIService) { s.Spec.GroupPriorityMinimum = 0 }, []string{"spec.groupPriorityMinimum: Invalid value"}},
		{"group priority over", func(s *apiregistrationv1.APIService) { s.Spec.GroupPriorityMinimum = 20001 }, []string{"spec.groupPriorityMinimum: Invalid value"}},
		{"version priority over", func(s *apiregistrationv1.APIService) { s.Spec.VersionPriority = 1001 }, []string{"spec.versionPriority: Invalid value"}},
		{"local with caBundle", func(s *apiregistrationv1.APIService) {
			local(s)
			s.Spec.CABundle = []byte("x")
		}, []string{"spec.caBundle: Invalid value"}},
		{"local insecure", func(s *apiregistrationv1.APIService) { s.Spec.Service = nil }, []string{"spec.insecureSkipTLSVerify: Invalid value"}},
		{"caBundle and insecure", func(s *apiregistrationv1.APIService) { s.Spec.CABundle = []byte("x") }, []string{"spec.insecureSkipTLSVerify: Invalid value"}},
		{"service without names", func(s *apiregistrationv1.APIService) { s.Spec.Service.Name, s.Spec.Service.Namespace = "", "" },
			[]string{"spec.service.namespace: Required value", "spec.service.name: Required value"}},
		{"bad port", func(s *apiregistrationv1.APIService) { s.Spec.Service.Port = new(int32(70000)) }, []string{"spec.service.port: Invalid value"}},
		{"namespaced", func(s *apiregistrationv1.APIService) { s.Namespace = "default" }, []string{"metadata.namespace: Forbidden"}},
	}
	for _, tt := range tests {
		s := remote()
		tt.edit(s)
		rules.Default(s)
		if got := typedtest.ErrStrings(rules.Validate(s)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("Validate(apiservice %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestPrepareCreate: a local APIService is Available at once, a
// service-backed one has no status until the controller checks it.
func TestPrepareCreate(t *testing.T) {
	s := remote()
	s.Status.Conditions = []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue}}
	rules.PrepareForCreate(s)
	if len(s.Status.Conditions) != 0 {
		t.Errorf("PrepareForCreate(service-backed) status %+v, want none", s.Status)
	}
	s.Spec.Service, s.Spec.InsecureSkipTLSVerify = nil, false
	rules.PrepareForCreate(s)
	want := LocalAvailable()
	want.LastTransitionTime = metav1.NewTime(now)
	if len(s.Status.Conditions) != 1 || s.Status.Conditions[0] != want {
		t.Errorf("PrepareForCreate(local) conditions %+v, want %+v", s.Status.Conditions, want)
	}
}

func TestStatusUpdate(t *testing.T) {
	old := remote()
	rules.Default(old)
	s := old.DeepCopy()
	s.Spec.GroupPriorityMinimum = 5
	s.Labels = map[string]string{"a": "b"}
	s.Status.Conditions = []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available, Status: "Maybe"}}
	rules.(apiserver.StatusPreparer).PrepareForStatusUpdate(s, old)
	if s.Spec.GroupPriorityMinimum != 100 || s.Labels != nil {
		t.Errorf("PrepareForStatusUpdate kept spec %+v, labels %v; want the stored ones", s.Spec, s.Labels)
	}
	if got, want := typedtest.ErrStrings(rules.(apiserver.StatusValidator).ValidateStatusUpdate(s, old)), []string{"status.conditions[0].status: Unsupported value"}; !typedtest.SameErrs(got, want) {
		t.Errorf("ValidateStatusUpdate(status Maybe) = %q, want %q", got, want)
	}
}

func TestSetAvailable(t *testing.T) {
	s := remote()
	down := apiregistrationv1.APIServiceCondition{Status: apiregistrationv1.ConditionFalse, Reason: "ServiceNotFound", Message: "gone"}
	if !SetAvailable(s, down, created) || IsAvailable(s) {
		t.Fatalf("SetAvailable(False) on no condition: not changed, or available")
	}
	if SetAvailable(s, down, now) {
		t.Errorf("SetAvailable(same condition) reported a change")
	}
	down.Message = "still gone"
	if !SetAvailable(s, down, now) || !Available(s).LastTransitionTime.Time.Equal(created) {
		t.Errorf("SetAvailable(new message) = %+v, want changed, transition time kept", Available(s))
	}
	if !SetAvailable(s, LocalAvailable(), now) || !IsAvailable(s) || !Available(s).LastTransitionTime.Time.Equal(now) {
		t.Errorf("SetAvailable(True) = %+v, want available since now", Available(s))
	}
}

func TestRow(t *testing.T) {
	s := remote()
	if got, want := rules.Row(s), []interface{}{"v1beta1.metrics.k8s.io", "kube-system/metrics-server", "Unknown", "26h"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Row(unchecked) = %#v, want %#v", got, want)
	}
	SetAvailable(s, apiregistrationv1.APIServiceCondition{Status: apiregistrationv1.ConditionFalse, Reason: "MissingEndpoints"}, now)
	if got := rules.Row(s)[2]; got != "False (MissingEndpoints)" {
		t.Errorf("Row(missing endpoints) available = %q, want False (MissingEndpoints)", got)
	}
	s.Spec.Service = nil
	SetAvailable(s, LocalAvailable(), now)
	if got := rules.Row(s)[1:3]; !reflect.DeepEqual(got, []interface{}{"Local", "True"}) {
		t.Errorf("Row(local) = %q, want Local, True", got)
	}
	var names []string
	for _, c := range rules.Columns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Service", "Available", "Age"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Columns() = %q, want %q", names, want)
	}
}

func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
