package probes

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func TestRunHandler(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	mux := http.NewServeMux()
	mux.HandleFunc("/stop", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Clone(context.Background()))
		mu.Unlock()
	})
	mux.HandleFunc("/oops", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cannot drain", http.StatusInternalServerError)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	port := serverPort(t, srv.Listener.Addr().String())

	c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: int32(port)}}}
	tg := HookTarget{Exec: scriptedExec, Pod: testPod, Container: c, PodIP: "127.0.0.1"}
	noExec := tg
	noExec.Exec = nil
	exec := func(cmd ...string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
	}
	httpGet := func(path string, scheme corev1.URIScheme) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("admin"), Scheme: scheme,
			HTTPHeaders: []corev1.HTTPHeader{{Name: "Authorization", Value: "Bearer x"}}}}
	}
	const in = ` for container "app" in pod ns/web (uid-1) failed: `
	for _, tc := range []struct {
		name   string
		h      *corev1.LifecycleHandler
		tg     HookTarget
		want   string // the error, "" for none
		wantIs error
	}{
		{"exec exits 0", exec("exit", "0", "done"), tg, "", nil},
		{"exec exits 3", exec("exit", "3", "no socket"), tg, `exec lifecycle hook ([exit 3 no socket])` + in + `command exited with code 3, message: "no socket!\n"`, nil},
		{"exec on a runtime without exec", exec("exit", "0"), noExec,
			`exec lifecycle hook ([exit 0])` + in + `the container runtime cannot run commands in containers, message: ""`, ErrExecNotSupported},
		{"exec in a container gone", exec("gone"), tg, `exec lifecycle hook ([gone])` + in + `exec in ns/web (uid-1)/app: not found, message: ""`, runtime.ErrNotFound},
		{"http 200", httpGet("/stop", ""), tg, "", nil},
		{"http 500 succeeds, as kubelet's hooks take any answer", httpGet("/oops", ""), tg, "", nil},
		{"https to a plain HTTP server falls back", httpGet("/stop", corev1.URISchemeHTTPS), tg, "", nil},
		{"http without pod IP", httpGet("/stop", ""), HookTarget{Pod: testPod, Container: c}, `HTTP lifecycle hook (/stop)` + in + `the pod has no IP yet`, ErrNoPodIP},
		{"sleep 0", &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}, tg, "", nil},
		{"no handler", &corev1.LifecycleHandler{}, tg, `lifecycle hook` + in + `invalid: no handler, it needs one of exec, httpGet or sleep`, ErrInvalid},
		{"nil handler", nil, tg, `lifecycle hook` + in + `invalid: no handler`, ErrInvalid},
		{"two handlers", &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"x"}}, Sleep: &corev1.SleepAction{}}, tg,
			`lifecycle hook` + in + `invalid: 2 handlers (exec, sleep), it needs exactly one`, ErrInvalid},
		{"tcpSocket", &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(80)}}, tg,
			`lifecycle hook` + in + `invalid: tcpSocket is not supported as a lifecycle hook`, ErrInvalid},
		{"negative sleep", &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: -1}}, tg,
			`lifecycle hook` + in + `invalid: sleep seconds is -1, must not be negative`, ErrInvalid},
		{"missing named port", &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope")}}, tg,
			`lifecycle hook` + in + `invalid: port "nope" is not the name of one of the container's ports`, ErrInvalid},
		{"empty exec", exec(), tg, `lifecycle hook` + in + `invalid: exec has no command`, ErrInvalid},
		{"no container", exec("exit", "0"), HookTarget{}, `invalid lifecycle hook: no container given`, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := RunHandler(t.Context(), tc.h, tc.tg)
			var got string
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("RunHandler = %q\nwant %q", got, tc.want)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("RunHandler = %v, want it to wrap %v", err, tc.wantIs)
			}
		})
	}

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("the server got %d requests, want 2", len(seen))
	}
	if ua := seen[0].Header.Get("User-Agent"); ua != "kube-lifecycle/"+KubeVersion {
		t.Errorf("User-Agent %q, want kube-lifecycle/%s", ua, KubeVersion)
	}
	if a := seen[0].Header.Get("Authorization"); a != "Bearer x" {
		t.Errorf("Authorization %q, want the hook's", a)
	}
	if a := seen[1].Header.Get("Authorization"); a != "" {
		t.Errorf("the plain HTTP retry of an HTTPS hook sent Authorization %q, want none", a)
	}
}

func TestRunHandlerExecTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), shortTimeout)
	defer cancel()
	c := &corev1.Container{Name: "app"}
	err := RunHandler(ctx, &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"hang"}}},
		HookTarget{Exec: scriptedExec, Pod: testPod, Container: c})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "exec lifecycle hook ([hang])") {
		t.Errorf("RunHandler = %v, want an exec hook error wrapping context.DeadlineExceeded", err)
	}
}

func TestRunHandlerHTTPStopsWithContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(t.Context(), shortTimeout)
	defer cancel()
	c := &corev1.Container{Name: "app"}
	err := RunHandler(ctx, &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(serverPort(t, srv.Listener.Addr().String()))}},
		HookTarget{Pod: testPod, Container: c, PodIP: "127.0.0.1"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RunHandler = %v, want it to wrap context.DeadlineExceeded", err)
	}
}

func TestRunHandlerSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &corev1.Container{Name: "app"}
		h := &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}
		start := time.Now()
		if err := RunHandler(t.Context(), h, HookTarget{Pod: testPod, Container: c}); err != nil {
			t.Fatalf("RunHandler(sleep 5) = %v", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("sleep 5 took %v", d)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start = time.Now()
		err := RunHandler(ctx, h, HookTarget{Pod: testPod, Container: c})
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("sleep 5 cut by a 2s context took %v", d)
		}
		const want = `sleep lifecycle hook (5) for container "app" in pod ns/web (uid-1) failed: container terminated before sleep hook finished: context deadline exceeded`
		if err == nil || err.Error() != want || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("RunHandler = %v, want %q", err, want)
		}
	})
}
