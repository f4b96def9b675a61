package apiserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// allowAll answers every SelfSubjectAccessReview with allowed.
type allowAll struct{}

func (allowAll) Create(_ context.Context, obj runtime.Object) (runtime.Object, error) {
	r := obj.(*authorizationv1.SelfSubjectAccessReview)
	r.Status.Allowed = true
	return r, nil
}

// TestCreateOnlyNegotiation: a create-only resource answers in the
// encoding asked, as PartialObjectMetadata when asked, and with 406 Not
// Acceptable when asked for a Table, as upstream answers for resources
// without a table convertor (its conformance spec "should return a 406
// for a backend which does not implement metadata").
func TestCreateOnlyNegotiation(t *testing.T) {
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	newObj := func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} }
	srv, err := New(Config{Store: st, Resources: append(testResources(), Resource{
		GroupVersion: authorizationv1.SchemeGroupVersion, Kind: "SelfSubjectAccessReview", Plural: "selfsubjectaccessreviews",
		Singular: "selfsubjectaccessreview", New: newObj, NewList: newObj, AddToScheme: authorizationv1.AddToScheme, Creator: allowAll{},
	})})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	const body = `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/","verb":"get"}}}`
	post := func(accept string) (int, string, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", hs.URL+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	for _, tc := range []struct {
		accept string
		code   int
		ct     string
	}{
		{"", 201, "application/json"},
		{"application/yaml", 201, "application/yaml"},
		{"application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", 201, "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"},
		{"application/json;as=Table;v=v1;g=meta.k8s.io", 406, "application/json"},
		{"application/json;as=Table;v=v1;g=meta.k8s.io, application/json", 201, "application/json"},
	} {
		code, ct, b := post(tc.accept)
		if code != tc.code || ct != tc.ct {
			t.Errorf("Accept %q: %d %s, want %d %s", tc.accept, code, ct, tc.code, tc.ct)
		}
		if code == 406 {
			var st metav1.Status
			if err := json.Unmarshal(b, &st); err != nil || st.Code != 406 || st.Reason != metav1.StatusReasonNotAcceptable {
				t.Errorf("Accept %q: body %s, want a 406 Status", tc.accept, b)
			}
		}
	}
	_, _, b := post("")
	var got authorizationv1.SelfSubjectAccessReview
	if err := json.Unmarshal(b, &got); err != nil || !got.Status.Allowed {
		t.Errorf("review = %s, %v; want allowed", b, err)
	}
}
