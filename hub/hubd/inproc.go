package hubd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/manager"
)

// The hub's own parts use the Kubernetes API like any client: the sync
// endpoint applying a node's status or renewing its lease (as that node),
// the controllers (as system:kube-controller-manager) and the scheduler (as
// system:kube-scheduler). They get the same defaults, validation,
// authorization and admission as a request over HTTPS, without TLS or a
// socket: inprocTransport hands client-go's requests straight to the API
// handler and streams the answer back, so watches work as over a
// connection.

// hubUser is the identity of the hub's own requests that act for nobody
// else (reading bootstrap tokens, registering nodes).
var hubUser = auth.User{Name: "system:outpost-hub", Groups: []string{auth.MastersGroup}}

// The identities of the hub's controllers and scheduler, as upstream names
// the users of kube-controller-manager and kube-scheduler.
var (
	controllerManagerUser = auth.User{Name: auth.ControllerManagerUser, Groups: []string{auth.AuthenticatedGroup}}
	schedulerUser         = auth.User{Name: auth.SchedulerUser, Groups: []string{auth.AuthenticatedGroup}}
)

// nodeUser returns the identity of node name.
func nodeUser(name string) auth.User {
	return auth.User{Name: auth.NodeUserPrefix + name, Groups: []string{auth.NodesGroup}}
}

// userOfContext is the identity of an in-process request whose context
// names its user (auth.WithUser); a request without one is anonymous, and
// every API request of it is refused.
func userOfContext(r *http.Request) auth.User {
	if u, ok := auth.UserFrom(r.Context()); ok {
		return u
	}
	return auth.Anonymous
}

// inprocTransport serves each request with h as the user that user
// returns for it. The answer streams: RoundTrip returns once the handler
// has written the status line (or its first bytes, or flushed), and the
// body delivers what it writes as it writes it. Closing the body ends the
// request's context, which ends a watch.
type inprocTransport struct {
	h    *apiHandler
	user func(*http.Request) auth.User // non-nil
	log  *slog.Logger                  // non-nil
}

func (t inprocTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(r.Context())
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, code: http.StatusOK, pw: pw, ready: make(chan struct{})}
	req := r.WithContext(ctx)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				// The API handler's panic is the hub's bug, but it
				// should cost this request, not the process, as it
				// would over HTTPS.
				t.log.Error("in-process API request panicked", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				w.fail(fmt.Errorf("in-process API request panicked: %v", p))
				return
			}
			w.finish()
		}()
		t.h.serveAs(w, req, t.user(req))
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		cancel()
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	if w.err != nil {
		cancel()
		return nil, w.err
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)),
		StatusCode:    w.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          &pipeBody{pr: pr, cancel: cancel},
		ContentLength: -1,
		Request:       r,
	}, nil
}

// pipeWriter is the ResponseWriter of an in-process request: the header
// is handed over when the handler first writes, and the body goes through
// a pipe to the client.
type pipeWriter struct {
	header http.Header // the handler's
	sent   http.Header // the client's copy of header, once ready is closed
	code   int
	pw     *io.PipeWriter

	once  sync.Once
	ready chan struct{} // closed once header and code are the client's
	err   error         // why there is no response; set before ready closes
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.code = code
		w.sent = w.header.Clone() // the handler may go on touching its map
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

func (w *pipeWriter) Flush() { w.WriteHeader(http.StatusOK) }

// finish ends the body once the handler has returned.
func (w *pipeWriter) finish() {
	w.WriteHeader(http.StatusOK)
	w.pw.Close()
}

// fail ends the request with err: RoundTrip returns it if the handler had
// not answered yet, else the body's reader gets it.
func (w *pipeWriter) fail(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.ready)
	})
	w.pw.CloseWithError(err)
}

// pipeBody is the body of an in-process response.
type pipeBody struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

// Close ends the request: the handler's writes fail and its context ends.
func (b *pipeBody) Close() error {
	b.cancel()
	return b.pr.Close()
}

// inprocConfig returns the client configuration of in-process requests
// made as the user that user returns for each: protobuf both ways, as
// kubelet and controllers speak, and no client-side rate limit (the hub's
// own parts are not the clients it protects itself from).
func inprocConfig(h *apiHandler, userAgent string, user func(*http.Request) auth.User, log *slog.Logger) (*rest.Config, *http.Client) {
	cfg := &rest.Config{
		Host:      "http://hub.internal",
		QPS:       -1,
		UserAgent: userAgent,
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		},
	}
	return cfg, &http.Client{Transport: inprocTransport{h: h, user: user, log: log}}
}

// inprocClient returns a clientset whose requests go to h as the user of
// each request's context (see auth.WithUser). Every status a node sends
// costs the hub a request through it.
func inprocClient(h *apiHandler, log *slog.Logger) (kubernetes.Interface, error) {
	cfg, hc := inprocConfig(h, "outpost-hub", userOfContext, log)
	return kubernetes.NewForConfigAndClient(cfg, hc)
}

// inprocClientsAs returns a clientset and a metadata client whose requests
// go to h as u.
func inprocClientsAs(h *apiHandler, u auth.User, userAgent string, log *slog.Logger) (kubernetes.Interface, metadata.Interface, error) {
	c, err := inprocAllClientsAs(h, u, userAgent, log)
	return c.Client, c.Metadata, err
}

// inprocAllClientsAs is inprocClientsAs with the dynamic and
// apiextensions clients too, for the controllers.
func inprocAllClientsAs(h *apiHandler, u auth.User, userAgent string, log *slog.Logger) (manager.Clients, error) {
	var c manager.Clients
	cfg, hc := inprocConfig(h, userAgent, func(*http.Request) auth.User { return u }, log)
	var err error
	if c.Client, err = kubernetes.NewForConfigAndClient(cfg, hc); err != nil {
		return c, err
	}
	if c.Metadata, err = metadata.NewForConfigAndClient(metadata.ConfigFor(cfg), hc); err != nil {
		return c, err
	}
	if c.Dynamic, err = dynamic.NewForConfigAndClient(cfg, hc); err != nil {
		return c, err
	}
	if c.Extensions, err = apiextensionsclient.NewForConfigAndClient(cfg, hc); err != nil {
		return c, err
	}
	return c, nil
}
