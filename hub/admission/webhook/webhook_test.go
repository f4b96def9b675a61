package webhook_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/admission/webhook"
)

// wantStatus fails t unless err is an API error of code whose message
// contains each of parts.
func wantStatus(t *testing.T, what string, err error, code int32, parts ...string) {
	t.Helper()
	st, ok := err.(apierrors.APIStatus)
	if !ok {
		t.Errorf("%s: error %v (%T), want an API error %d", what, err, err, code)
		return
	}
	s := st.Status()
	if s.Code != code {
		t.Errorf("%s: code %d (%s), want %d", what, s.Code, s.Message, code)
	}
	for _, p := range parts {
		if !strings.Contains(s.Message, p) {
			t.Errorf("%s: message %q lacks %q", what, s.Message, p)
		}
	}
}

// TestMutatingURL: a mutating url webhook's patch is stored, and it is
// told who asked, what and whether it is a dry run.
func TestMutatingURL(t *testing.T) {
	e := newEnv(t)
	s := e.review(t, addLabel("mutated", "yes"))
	e.setMutating(mconfig("label", mutating("label.example.com", e.urlConfig(s.Server, "/mutate"))))
	ctx := context.Background()
	cms := e.cs.CoreV1().ConfigMaps("default")

	if _, err := cms.Create(ctx, configMap("a", map[string]string{"app": "x"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	got, err := cms.Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Labels["mutated"] != "yes" || got.Labels["app"] != "x" {
		t.Fatalf("stored configmap: labels %v, %v; want app=x and mutated=yes", got.Labels, err)
	}
	calls := s.calls()
	if len(calls) != 1 {
		t.Fatalf("webhook called %d times, want 1", len(calls))
	}
	r := calls[0]
	if r.Operation != admissionv1.Create || r.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) ||
		r.Resource != (metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}) || r.Namespace != "default" || r.Name != "a" ||
		r.UserInfo.Username != testUser.Name || !slices.Equal(r.UserInfo.Groups, testUser.Groups) || r.DryRun == nil || *r.DryRun ||
		len(r.OldObject.Raw) != 0 {
		t.Errorf("webhook request = %+v", r)
	}

	got.Data["k"] = "v2"
	delete(got.Labels, "mutated")
	if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if got, _ := cms.Get(ctx, "a", metav1.GetOptions{}); got.Labels["mutated"] != "yes" {
		t.Errorf("updated configmap: labels %v, want mutated=yes", got.Labels)
	}
	if calls := s.calls(); len(calls) != 2 || calls[1].Operation != admissionv1.Update || len(calls[1].OldObject.Raw) < 10 {
		t.Errorf("update: webhook calls %d, want a second, an UPDATE with the old object", len(calls))
	}

	// Writes of other resources are not sent.
	if _, err := e.cs.CoreV1().Secrets("default").Create(ctx, &corev1Secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.calls()); n != 2 {
		t.Errorf("a secret's create called the configmaps webhook: %d calls, want 2", n)
	}
}

// TestValidatingDenies: validating webhooks are all asked, and a denial
// reaches the client with upstream's message and the webhook's code.
func TestValidatingDenies(t *testing.T) {
	e := newEnv(t)
	deny := e.review(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if strings.HasPrefix(req.Name, "bad") {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "configmaps may not be bad"}}
		}
		if req.Name == "quiet" {
			return &admissionv1.AdmissionResponse{}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	ok := e.review(t, allow)
	e.setValidating(vconfig("policy",
		validating("deny.example.com", e.urlConfig(deny.Server, "/"), admissionregistrationv1.Fail),
		validating("ok.example.com", e.urlConfig(ok.Server, "/"), admissionregistrationv1.Fail)))
	ctx := context.Background()
	cms := e.cs.CoreV1().ConfigMaps("default")

	_, err := cms.Create(ctx, configMap("bad-one", nil), metav1.CreateOptions{})
	wantStatus(t, "create bad-one", err, http.StatusForbidden, `admission webhook "deny.example.com" denied the request: configmaps may not be bad`)
	_, err = cms.Create(ctx, configMap("quiet", nil), metav1.CreateOptions{})
	wantStatus(t, "create quiet", err, http.StatusBadRequest, `admission webhook "deny.example.com" denied the request without explanation`)
	if _, err := cms.Create(ctx, configMap("good", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("create good: %v", err)
	}
	if n, m := len(deny.calls()), len(ok.calls()); n != 3 || m != 3 {
		t.Errorf("calls: deny %d, ok %d; want 3 each", n, m)
	}
	if _, err := cms.Get(ctx, "bad-one", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get bad-one after the denial: %v, want NotFound", err)
	}
}

// TestFailurePolicy: a webhook that times out, answers garbage, answers
// too much or cannot be reached refuses the write with failurePolicy
// Fail, with upstream's message, and is ignored with Ignore.
func TestFailurePolicy(t *testing.T) {
	e := newEnv(t, func(c *webhook.Config) { c.MaxResponseBytes = 4096 })
	release := make(chan struct{})
	slow := e.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices the client leave
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release) }) // before slow closes
	garbage := e.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("garbage")) }))
	huge := e.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(strings.Repeat(" ", 8192))) }))
	oops := e.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("oops"))
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "https://" + l.Addr().String() + "/"
	l.Close()
	untrusted := e.urlConfig(garbage.Server, "/")
	untrusted.CABundle = nil

	cases := []struct {
		name  string
		cc    admissionregistrationv1.WebhookClientConfig
		parts []string
	}{
		{"slow", e.urlConfig(slow.Server, "/slow"), []string{`Post "` + slow.URL + `/slow?timeout=1s": context deadline exceeded`}},
		{"garbage", e.urlConfig(garbage.Server, "/"), []string{"failed to call webhook: couldn't get version/kind; json parse error"}},
		{"huge", e.urlConfig(huge.Server, "/"), []string{"failed to call webhook: the response of the webhook is larger than 4096 bytes"}},
		{"oops", e.urlConfig(oops.Server, "/"), []string{`failed to call webhook: an error on the server ("oops") has prevented the request from succeeding`}},
		{"gone", admissionregistrationv1.WebhookClientConfig{URL: &gone, CABundle: e.ca.pem}, []string{"connect: connection refused"}},
		{"untrusted", untrusted, []string{"tls: failed to verify certificate"}},
	}
	ctx := context.Background()
	cms := e.cs.CoreV1().ConfigMaps("default")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fail := validating(tc.name+".example.com", tc.cc, admissionregistrationv1.Fail)
			fail.TimeoutSeconds = new(int32(1))
			e.setValidating(vconfig("failing", fail))
			_, err := cms.Create(ctx, configMap(tc.name+"-fail", nil), metav1.CreateOptions{})
			wantStatus(t, "with Fail", err, http.StatusInternalServerError,
				append([]string{`Internal error occurred: failed calling webhook "` + tc.name + `.example.com": `}, tc.parts...)...)

			ignore := fail
			ignore.FailurePolicy = new(admissionregistrationv1.Ignore)
			e.setValidating(vconfig("ignored", ignore))
			if _, err := cms.Create(ctx, configMap(tc.name+"-ignore", nil), metav1.CreateOptions{}); err != nil {
				t.Errorf("with Ignore: %v, want it created", err)
			}

			m := mutating(tc.name+".example.com", tc.cc)
			m.TimeoutSeconds = new(int32(1))
			e.setValidating()
			e.setMutating(mconfig("failing", m))
			_, err = cms.Create(ctx, configMap(tc.name+"-mutating", nil), metav1.CreateOptions{})
			wantStatus(t, "mutating with Fail", err, http.StatusInternalServerError, `failed calling webhook "`+tc.name+`.example.com"`)
			e.setMutating()
		})
	}
}

// TestResponseContract: answers that break the AdmissionReview contract
// are failures to call the webhook, with upstream's messages.
func TestResponseContract(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name     string
		f        func(http.ResponseWriter, *http.Request)
		mutating bool
		want     string
	}{
		{"wrong uid", answer(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"nope","allowed":true}}`), false,
			`received invalid webhook response: expected response.uid="`},
		{"no response", answer(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), false,
			"received invalid webhook response: webhook response was absent"},
		{"wrong kind", answer(`{"apiVersion":"v1","kind":"ConfigMap"}`), false,
			`failed to call webhook: no kind "ConfigMap" is registered for version "v1"`},
		{"v1beta1 answer to v1", echoUID(`"allowed":true`, "admission.k8s.io/v1beta1"), false,
			"received invalid webhook response: webhook response was absent"},
		{"patch from a validating webhook", echoUID(`"allowed":true,"patch":"W10=","patchType":"JSONPatch"`, "admission.k8s.io/v1"), false,
			"received invalid webhook response: validating webhook may not return response.patch"},
		{"patch without a type", echoUID(`"allowed":true,"patch":"W10="`, "admission.k8s.io/v1"), true,
			"received invalid webhook response: webhook returned response.patch but not response.patchType"},
		{"undecodable patch", echoUID(`"allowed":true,"patch":"e30=","patchType":"JSONPatch"`, "admission.k8s.io/v1"), true,
			"received undecodable patch in webhook response"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		s := e.serve(t, http.HandlerFunc(tc.f))
		if tc.mutating {
			e.setValidating()
			e.setMutating(mconfig("contract", mutating("contract.example.com", e.urlConfig(s.Server, "/"))))
		} else {
			e.setValidating(vconfig("contract", validating("contract.example.com", e.urlConfig(s.Server, "/"), admissionregistrationv1.Fail)))
		}
		_, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("x", nil), metav1.CreateOptions{})
		wantStatus(t, tc.name, err, http.StatusInternalServerError, `failed calling webhook "contract.example.com": `+tc.want)
	}
}

// answer answers body.
func answer(body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }
}

// echoUID answers a review of apiVersion of the request's uid with the
// response fields fields.
func echoUID(fields, apiVersion string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		var ar admissionv1.AdmissionReview
		if err := jsonDecode(r, &ar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write([]byte(`{"apiVersion":"` + apiVersion + `","kind":"AdmissionReview","response":{"uid":"` + string(ar.Request.UID) + `",` + fields + `}}`))
	}
}
