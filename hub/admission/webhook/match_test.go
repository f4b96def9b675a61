package webhook_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSelectorsAndConditions: a webhook is called only for objects its
// namespaceSelector, objectSelector and matchConditions select.
func TestSelectorsAndConditions(t *testing.T) {
	e := newEnv(t)
	var seen atomic.Pointer[[]string]
	seen.Store(&[]string{})
	deny := e.review(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "selected"}}
	})
	w := validating("selective.example.com", e.urlConfig(deny.Server, "/"), admissionregistrationv1.Fail)
	w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	w.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "webhook", Operator: metav1.LabelSelectorOpIn, Values: []string{"on"}}}}
	w.MatchConditions = []admissionregistrationv1.MatchCondition{
		{Name: "not-skipped", Expression: `object.metadata.name != "skip"`},
		{Name: "alice", Expression: `request.userInfo.username == "alice"`},
	}
	e.setValidating(vconfig("selective", w))
	ctx := context.Background()
	for _, tc := range []struct {
		ns, name string
		labels   map[string]string
		called   bool
	}{
		{"prod", "a", map[string]string{"webhook": "on"}, true},
		{"default", "b", map[string]string{"webhook": "on"}, false},
		{"prod", "c", map[string]string{"webhook": "off"}, false},
		{"prod", "d", nil, false},
		{"prod", "skip", map[string]string{"webhook": "on"}, false},
	} {
		_, err := e.cs.CoreV1().ConfigMaps(tc.ns).Create(ctx, configMap(tc.name, tc.labels), metav1.CreateOptions{})
		if tc.called {
			wantStatus(t, tc.ns+"/"+tc.name, err, http.StatusBadRequest, `admission webhook "selective.example.com" denied the request: selected`)
		} else if err != nil {
			t.Errorf("%s/%s: %v, want it created without calling the webhook", tc.ns, tc.name, err)
		}
	}
	if n := len(deny.calls()); n != 1 {
		t.Errorf("webhook called %d times, want once", n)
	}

	// An update is selected by the old object's labels too.
	cm, err := e.cs.CoreV1().ConfigMaps("prod").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels["webhook"] = "on"
	_, err = e.cs.CoreV1().ConfigMaps("prod").Update(ctx, cm, metav1.UpdateOptions{})
	wantStatus(t, "update c to webhook=on", err, http.StatusBadRequest, "selected")

	// A matchCondition that fails to evaluate fails closed with Fail.
	w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "broken", Expression: `object.data["missing"] == "x"`}}
	e.setValidating(vconfig("selective", w))
	_, err = e.cs.CoreV1().ConfigMaps("prod").Create(ctx, configMap("e", map[string]string{"webhook": "on"}), metav1.CreateOptions{})
	wantStatus(t, "broken matchCondition", err, http.StatusForbidden, `configmaps "e" is forbidden`, "no such key: missing")
}

// TestServiceWebhook: a service webhook is reached through DialService,
// its certificate verified for NAME.NAMESPACE.svc.
func TestServiceWebhook(t *testing.T) {
	e := newEnv(t)
	s := e.review(t, addLabel("via", "service"))
	e.services.Store("default/webhook", s.Listener.Addr().String())
	path := "/mutate"
	cc := admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "webhook", Path: &path, Port: new(int32(443))},
		CABundle: e.ca.pem,
	}
	e.setMutating(mconfig("svc", mutating("svc.example.com", cc)))
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, _ := e.cs.CoreV1().ConfigMaps("default").Get(ctx, "a", metav1.GetOptions{}); got.Labels["via"] != "service" {
		t.Errorf("stored labels %v, want via=service", got.Labels)
	}

	// A service that cannot be reached fails the webhook.
	cc.Service.Name = "missing"
	e.setMutating(mconfig("svc", mutating("svc.example.com", cc)))
	_, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("b", nil), metav1.CreateOptions{})
	wantStatus(t, "unreachable service", err, http.StatusInternalServerError,
		`failed calling webhook "svc.example.com": failed to call webhook: Post "https://missing.default.svc:443/mutate?timeout=10s"`)
}

// TestDryRun: a dry run is refused by a webhook that may have side
// effects, and sent with dryRun to one that has none.
func TestDryRun(t *testing.T) {
	e := newEnv(t)
	s := e.review(t, allow)
	w := validating("effects.example.com", e.urlConfig(s.Server, "/"), admissionregistrationv1.Ignore)
	w.SideEffects = new(admissionregistrationv1.SideEffectClassSome)
	e.setValidating(vconfig("effects", w))
	ctx := context.Background()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("a", nil), dry)
	wantStatus(t, "dry run with side effects", err, http.StatusBadRequest, `admission webhook "effects.example.com" does not support dry run`)

	w.SideEffects = new(admissionregistrationv1.SideEffectClassNoneOnDryRun)
	e.setValidating(vconfig("effects", w))
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("a", nil), dry); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	calls := s.calls()
	if len(calls) != 1 || calls[0].DryRun == nil || !*calls[0].DryRun || !strings.Contains(string(calls[0].Options.Raw), `"dryRun":["All"]`) {
		t.Errorf("dry run calls %+v, want one with dryRun", calls)
	}
}

// TestReinvocation: a webhook with reinvocationPolicy IfNeeded is called
// again when a webhook after it changed the object; one with Never is
// not. A webhook that only accepts v1beta1 gets a v1beta1 review.
func TestReinvocation(t *testing.T) {
	e := newEnv(t)
	first := e.review(t, allow)
	never := e.review(t, allow)
	betaSeen := atomic.Bool{}
	beta := e.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ar struct {
			APIVersion string `json:"apiVersion"`
			Request    struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		if err := jsonDecode(r, &ar); err != nil || ar.APIVersion != "admission.k8s.io/v1beta1" {
			http.Error(w, "want v1beta1", http.StatusBadRequest)
			return
		}
		betaSeen.Store(true)
		// v1beta1 has no patchType: a patch is a JSONPatch.
		w.Write([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"uid":"` + ar.Request.UID +
			`","allowed":true,"patch":"` + b64(`[{"op":"add","path":"/data/beta","value":"yes"}]`) + `"}}`))
	}))
	a := mutating("a.example.com", e.urlConfig(first.Server, "/"))
	a.ReinvocationPolicy = new(admissionregistrationv1.IfNeededReinvocationPolicy)
	n := mutating("n.example.com", e.urlConfig(never.Server, "/"))
	b := mutating("b.example.com", e.urlConfig(beta.Server, "/"))
	b.AdmissionReviewVersions = []string{"v1beta2", "v1beta1"}
	e.setMutating(mconfig("1-first", a, n), mconfig("2-second", b))
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, _ := e.cs.CoreV1().ConfigMaps("default").Get(ctx, "a", metav1.GetOptions{}); got.Data["beta"] != "yes" || !betaSeen.Load() {
		t.Errorf("stored data %v, v1beta1 seen %v; want beta=yes from the v1beta1 webhook", got.Data, betaSeen.Load())
	}
	if na, nn := len(first.calls()), len(never.calls()); na != 2 || nn != 1 {
		t.Errorf("calls: IfNeeded %d, Never %d; want 2 and 1", na, nn)
	}
	if c := first.calls(); len(c) == 2 && !strings.Contains(string(c[1].Object.Raw), `"beta":"yes"`) {
		t.Errorf("the second call of the IfNeeded webhook saw %s, want the changed object", c[1].Object.Raw)
	}
}
