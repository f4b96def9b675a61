package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// FuzzDecodeTrialChecks feeds arbitrary records to decodeTrialChecks: it
// must never panic, and what it accepts must be valid checks that survive
// a round trip unchanged.
func FuzzDecodeTrialChecks(f *testing.F) {
	good, err := json.Marshal(trialChecks{Release: "r2", Version: "2.0.0", Checks: []manifest.HealthCheck{
		{Name: "db", Namespace: "default", Pod: "db", Exec: []string{"pg_isready", "-q"}},
		{Name: "app", Namespace: "default", Pod: "app", HTTP: &manifest.HTTPCheck{Port: 8080, Path: "/healthz"}, TimeoutSeconds: 3},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"release":"r","version":"1.0.0","checks":null}`))
	f.Add([]byte(`{"release":"r","version":"1.0.0","checks":[{"name":"a","namespace":"b","pod":"c","exec":[""]}]}`))
	f.Add([]byte(`{"version":"1.0.0"} {}`))
	f.Add([]byte(`{"version":"1.0.0","extra":1}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		tc, err := decodeTrialChecks(data)
		if err != nil {
			if tc != nil {
				t.Fatalf("decodeTrialChecks() = %+v, %v: want nil with an error", tc, err)
			}
			return
		}
		if err := manifest.ValidateHealthChecks(tc.Checks); err != nil || tc.Version == "" {
			t.Fatalf("decodeTrialChecks accepted %+v: %v", tc, err)
		}
		again, err := json.Marshal(tc)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeTrialChecks(again)
		if err != nil || !reflect.DeepEqual(tc, back) {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, tc)
		}
	})
}

// TestDecodeTrialChecks checks the record's size limit and strictness.
func TestDecodeTrialChecks(t *testing.T) {
	for _, tt := range []struct {
		name, data, want string
	}{
		{"unknown field", `{"version":"1.0.0","checks":[],"x":1}`, "unknown field"},
		{"trailing", `{"version":"1.0.0"} 1`, "data after"},
		{"no version", `{"release":"r"}`, "no version"},
		{"invalid check", `{"version":"1.0.0","checks":[{"name":"a","namespace":"b","pod":"c"}]}`, "neither exec nor http"},
		{"too large", `{"version":"1.0.0","release":"` + strings.Repeat("a", maxFirmwareFile) + `"}`, "over"},
	} {
		if _, err := decodeTrialChecks([]byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: decodeTrialChecks() = %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

// TestHTTPCheck runs HTTP checks against a pod whose IP is 127.0.0.1.
func TestHTTPCheck(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			if r.URL.RawQuery != "full=1" {
				http.Error(w, "query "+r.URL.RawQuery, http.StatusBadRequest)
				return
			}
			w.Write([]byte(strings.Repeat("x", 1<<20))) // more than the check reads
		case "/moved":
			http.Redirect(w, r, "http://192.0.2.1/elsewhere", http.StatusFound)
		case "/slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		default:
			http.Error(w, "database down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	defer close(block)
	host, portStr, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portStr)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app", UID: "uid-app"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}

	for _, tt := range []struct {
		path string
		port int
		want string // a substring of the error; "" for a pass
	}{
		{"/ok?full=1", port, ""},
		{"/moved", port, ""}, // 3xx passes, not followed
		{"/healthz", port, "pod default/app: HTTP probe failed with statuscode: 503"},
		{"/slow", port, "Client.Timeout exceeded"},
		{"/ok", closedPort, "connection refused"},
	} {
		h := &manifest.HealthCheck{Name: "app", Namespace: "default", Pod: "app",
			HTTP: &manifest.HTTPCheck{Port: tt.port, Path: tt.path}, TimeoutSeconds: 1}
		err := runCheck(context.Background(), h, pod, runtime.PodStatus{IP: host}, true, nil)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("HTTP check of %d%s = %v, want %q", tt.port, tt.path, err, tt.want)
		}
	}
}

// TestSelectPods checks which pods of the node a check selects.
func TestSelectPods(t *testing.T) {
	yes := true
	now := metav1.Now()
	pod := func(ns, name, owner string, controller bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if owner != "" {
			ref := metav1.OwnerReference{Kind: "DaemonSet", Name: owner}
			if controller {
				ref.Controller = &yes
			}
			p.OwnerReferences = []metav1.OwnerReference{ref}
		}
		return p
	}
	deleted := pod("default", "app", "", false)
	deleted.DeletionTimestamp = &now
	pods := []*corev1.Pod{
		pod("default", "app", "", false),
		pod("default", "app-x7k2p", "app", true),
		pod("default", "app-owned", "app", false), // an owner, not its controller
		pod("other", "app", "", false),
		pod("default", "db", "", false),
		deleted,
	}
	got := selectPods(pods, &manifest.HealthCheck{Namespace: "default", Pod: "app"})
	var names []string
	for _, p := range got {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if want := []string{"default/app", "default/app-x7k2p"}; !reflect.DeepEqual(names, want) {
		t.Errorf("selectPods(default/app) = %v, want %v", names, want)
	}
	if got := selectPods(pods, &manifest.HealthCheck{Namespace: "default", Pod: "modem"}); len(got) != 0 {
		t.Errorf("selectPods(default/modem) = %v, want none", got)
	}
}
