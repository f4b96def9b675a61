package hubd

import (
	"bytes"
	"io"
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// The hub's own parts that act for a node (the sync endpoint applying a
// node's status, renewing its lease) use the Kubernetes API like any
// client, as that node: the same defaults, validation, authorization and
// admission as a request over HTTPS, without TLS or a socket.
// inprocTransport hands client-go's requests straight to the API handler
// with the user their context carries (auth.WithUser).

// hubUser is the identity of the hub's own requests that act for nobody
// else (reading bootstrap tokens, registering nodes).
var hubUser = auth.User{Name: "system:outpost-hub", Groups: []string{auth.MastersGroup}}

// nodeUser returns the identity of node name.
func nodeUser(name string) auth.User {
	return auth.User{Name: auth.NodeUserPrefix + name, Groups: []string{auth.NodesGroup}}
}

// inprocTransport serves requests with h as the user of their context. It
// buffers each response whole, so it is not for watches.
type inprocTransport struct{ h *apiHandler }

func (t inprocTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	u, ok := auth.UserFrom(r.Context())
	if !ok {
		u = auth.Anonymous // every API request is refused
	}
	rec := &recorder{header: http.Header{}, code: http.StatusOK}
	t.h.serveAs(rec, r, u)
	return &http.Response{
		Status:        http.StatusText(rec.code),
		StatusCode:    rec.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Body:          io.NopCloser(&rec.body),
		ContentLength: int64(rec.body.Len()),
		Request:       r,
	}, nil
}

// recorder is the ResponseWriter of an in-process request.
type recorder struct {
	header      http.Header
	code        int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	r.wroteHeader = true
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = code, true
	}
}
func (r *recorder) Flush() {}

// inprocClient returns a clientset whose requests go to h as the user of
// each request's context (see auth.WithUser).
func inprocClient(h *apiHandler) (kubernetes.Interface, error) {
	cfg := &rest.Config{
		Host:      "http://hub.internal",
		QPS:       -1,
		UserAgent: "outpost-hub",
		// Protobuf both ways, as kubelet and controllers speak: every
		// status a node sends costs the hub a Get and an UpdateStatus
		// through this client.
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		},
	}
	return kubernetes.NewForConfigAndClient(cfg, &http.Client{Transport: inprocTransport{h: h}})
}
