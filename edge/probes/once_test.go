package probes

import (
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	port := serverPort(t, srv.Listener.Addr().String())
	tg := localTarget(nil)
	ht := HookTarget{Exec: scriptedExec, Pod: tg.pod, Container: tg.container, PodIP: tg.podIP}
	get := func(path string) *corev1.ProbeHandler {
		return &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}}
	}
	exec := func(cmd ...string) *corev1.ProbeHandler {
		return &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}}
	}
	for _, tc := range []struct {
		name string
		h    *corev1.ProbeHandler
		t    HookTarget
		want Outcome
		msg  string
	}{
		{"http pass", get("/healthz"), ht, Success, ""},
		{"http fail", get("/other"), ht, Failure, "HTTP probe failed with statuscode: 503"},
		{"exec pass", exec("exit", "0"), ht, Success, ""},
		{"exec fail", exec("exit", "2", "broken"), ht, Failure, "~broken"},
		{"exec timeout", exec("hang"), ht, Failure, "~timed out"},
		{"no exec", exec("exit", "0"), HookTarget{Pod: tg.pod, Container: tg.container}, Errored, "~exec"},
		{"two handlers", &corev1.ProbeHandler{Exec: exec("exit", "0").Exec, HTTPGet: get("/healthz").HTTPGet}, ht, Errored, "~exactly one"},
		{"no container", get("/healthz"), HookTarget{PodIP: "127.0.0.1"}, Errored, "~no container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkObservation(t, Once(t.Context(), tc.h, tc.t, shortTimeout*5), tc.want, tc.msg)
		})
	}
}
