package hubd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBadInputOverHTTPS: the defects a bad-input run found against the
// hub, each answered over HTTPS as upstream answers it: the JSON patch of
// copies that doubled the document is 413 at once; an operation that is
// not RFC 6902 is a 422 naming it; an update with a resourceVersion the
// server never issued is a 400; and a large list arrives whole.
func TestBadInputOverHTTPS(t *testing.T) {
	h, _ := startHub(t, t.TempDir(), noControllers) // counts only what it made
	c, server := adminClient(t, h.KubeconfigPath())
	do := func(method, path, ct, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, server+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	const cms = "/api/v1/namespaces/default/configmaps"
	amp := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"amp"},"data":{"k":"` + strings.Repeat("x", 1000) + `"}}`
	if code, b := do("POST", cms, "application/json", amp); code != 201 {
		t.Fatalf("create = %d %s", code, b)
	}
	var copies []string
	for i := range 23 {
		copies = append(copies, fmt.Sprintf(`{"op":"copy","from":"/data","path":"/data/c%d"}`, i))
	}
	for _, tc := range []struct {
		name, method, path, ct, body string
		code                         int
		reason, msg                  string
	}{
		{"copies doubling the document", "PATCH", cms + "/amp", "application/json-patch+json", "[" + strings.Join(copies, ",") + "]", 413, "RequestEntityTooLarge", "accumulated size increase of copy"},
		{"unknown operation", "PATCH", cms + "/amp", "application/json-patch+json", `[{"op":"explode","path":"/data"}]`, 422, "Invalid", `"op" is "explode"`},
		{"unparsable resourceVersion", "PUT", cms + "/amp", "application/json", strings.Replace(amp, `"name":"amp"`, `"name":"amp","resourceVersion":"zzz"`, 1), 400, "BadRequest", `"zzz" is not one this server issued`},
	} {
		code, b := do(tc.method, tc.path, tc.ct, tc.body)
		wantStatus(t, b, tc.code, tc.reason)
		var st metav1.Status
		json.Unmarshal(b, &st)
		if code != tc.code || !strings.Contains(st.Message, tc.msg) {
			t.Errorf("%s: %s = %d %q, want %d with %q", tc.name, tc.method, code, st.Message, tc.code, tc.msg)
		}
	}
	// The document is as it was.
	code, b := do("GET", cms+"/amp", "", "")
	var cm corev1.ConfigMap
	if err := json.Unmarshal(b, &cm); code != 200 || err != nil || len(cm.Data) != 1 {
		t.Errorf("GET after the refused patches = %d with %d data keys (%v), want the object as created", code, len(cm.Data), err)
	}

	// A list of 24 MB is written as it is read, and arrives whole.
	big := strings.Repeat("y", 1<<20)
	for i := range 24 {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big-%02d"},"data":{"k":%q}}`, i, big)
		if code, b := do("POST", cms, "application/json", body); code != 201 {
			t.Fatalf("create big-%02d = %d %.200s", i, code, b)
		}
	}
	code, b = do("GET", cms+"?labelSelector=", "", "")
	var list corev1.ConfigMapList
	if err := json.Unmarshal(b, &list); code != 200 || err != nil || len(list.Items) != 25 {
		t.Fatalf("list = %d with %d items (%v), want 25", code, len(list.Items), err)
	}
}
