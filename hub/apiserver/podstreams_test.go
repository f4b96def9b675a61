package apiserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// heldStreams answers every stream request after release is closed,
// with the pod and subresource it was given.
type heldStreams struct {
	started chan string
	release chan struct{}
}

func (h *heldStreams) ServePodStream(w http.ResponseWriter, r *http.Request, pod *corev1.Pod, sub string) error {
	h.started <- pod.Name + "/" + sub
	<-h.release
	io.WriteString(w, pod.Name+"/"+sub+" "+string(pod.UID))
	return nil
}

func podResources() []Resource {
	return append(testResources(), Resource{GroupVersion: corev1.SchemeGroupVersion, Kind: "Pod", Plural: "pods", Singular: "pod", Namespaced: true,
		New: func() runtime.Object { return &corev1.Pod{} }, NewList: func() runtime.Object { return &corev1.PodList{} }, AddToScheme: corev1.AddToScheme, Rules: testRules{}})
}

func TestPodStreams(t *testing.T) {
	held := &heldStreams{started: make(chan string, 1), release: make(chan struct{})}
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := New(Config{Store: st, Resources: podResources(), MaxInFlight: 1, PodStreams: held})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	rs := &rawServer{srv: srv, store: st, url: hs.URL}
	if code, body := rs.do(t, "POST", "/api/v1/namespaces", "application/json", `{"metadata":{"name":"ns1"}}`); code != 201 {
		t.Fatalf("create namespace = %d %s", code, body)
	}
	if code, body := rs.do(t, "POST", "/api/v1/namespaces/ns1/pods", "application/json", `{"metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`); code != 201 {
		t.Fatalf("create pod = %d %s", code, body)
	}

	// A stream holds no in-flight slot: with one slot, a stream is open
	// and a get is still served.
	got := make(chan string, 1)
	go func() {
		resp, err := http.Post(hs.URL+"/api/v1/namespaces/ns1/pods/web/exec?command=sh", "", nil)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	if sub := <-held.started; sub != "web/exec" {
		t.Errorf("PodStreams got %q, want web/exec", sub)
	}
	if code, body := rs.do(t, "GET", "/api/v1/namespaces/ns1/pods/web", "", ""); code != 200 {
		t.Errorf("get beside an open stream with one in-flight slot = %d %s, want 200", code, body)
	}
	close(held.release)
	if body := <-got; !strings.HasPrefix(body, "web/exec ") {
		t.Errorf("exec answered %q", body)
	}

	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/api/v1/namespaces/ns1/pods/web/log", 200},
		{"GET", "/api/v1/namespaces/ns1/pods/web/portforward", 200},
		{"POST", "/api/v1/namespaces/ns1/pods/web/attach", 200},
		{"PUT", "/api/v1/namespaces/ns1/pods/web/log", 405},
		{"DELETE", "/api/v1/namespaces/ns1/pods/web/exec", 405},
		{"GET", "/api/v1/namespaces/ns1/pods/gone/log", 404},
		{"GET", "/api/v1/namespaces/ns1/pods/web/proxy", 404},
	} {
		go func() { <-held.started }()
		code, body := rs.do(t, tc.method, tc.path, "", "")
		if code != tc.code {
			t.Errorf("%s %s = %d %s, want %d", tc.method, tc.path, code, body, tc.code)
		}
	}
	close(held.started)

	list := srv.resourceList(srv.res(), corev1.SchemeGroupVersion)
	want := map[string]bool{"pods/log": true, "pods/exec": true, "pods/attach": true, "pods/portforward": true}
	for _, r := range list.APIResources {
		delete(want, r.Name)
	}
	if len(want) > 0 {
		t.Errorf("discovery lacks %v", want)
	}
}

func TestPodStreamsUnserved(t *testing.T) {
	rs := startRaw(t, 0)
	if code, _ := rs.do(t, "GET", "/api/v1/namespaces/ns1/configmaps/x/log", "", ""); code != 404 {
		t.Errorf("a stream without PodStreams = %d, want 404", code)
	}
}
