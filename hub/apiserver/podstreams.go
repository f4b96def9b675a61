package apiserver

import (
	"errors"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PodStreams serves the streaming subresources of pods: log, exec, attach
// and portforward. The API server has found the pod and the caller is
// authorized; ServePodStream answers the request. It returns an error
// (an apierrors.APIStatus to choose the status) only when it has written
// nothing, for the API server to answer with; once it has written (an
// upgrade, a log's first bytes) it returns nil. It must be safe for
// concurrent use; its requests are long-running and hold no in-flight
// slot (see Config.MaxInFlight).
type PodStreams interface {
	ServePodStream(w http.ResponseWriter, r *http.Request, pod *corev1.Pod, subresource string) error
}

// isPodStream reports whether ri names a streaming subresource of a pod.
func isPodStream(ri requestInfo) bool {
	if ri.gv.Group != "" || ri.resource != "pods" || ri.name == "" {
		return false
	}
	switch ri.subresource {
	case "log", "exec", "attach", "portforward":
		return true
	}
	return false
}

// podStream serves a streaming subresource of a pod through
// Config.PodStreams: GET for log; GET (WebSocket) or POST (SPDY) for the
// others.
func (q *request) podStream() error {
	gr := schema.GroupResource{Resource: "pods/" + q.ri.subresource}
	switch {
	case q.ri.subresource == "log" && q.r.Method != http.MethodGet:
		return apierrors.NewMethodNotSupported(gr, q.r.Method)
	case q.r.Method != http.MethodGet && q.r.Method != http.MethodPost:
		return apierrors.NewMethodNotSupported(gr, q.r.Method)
	}
	kv, err := q.s.store.Get(q.ctx(), q.res.key(q.ri.namespace, q.ri.name), 0)
	if err != nil {
		return storeError(err, q.res.gr, q.ri.name)
	}
	obj, err := q.res.decode(kv)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return apierrors.NewInternalError(errNotPod)
	}
	return q.s.cfg.PodStreams.ServePodStream(q.w, q.r, pod, q.ri.subresource)
}

var errNotPod = errors.New("stored pod does not decode to a Pod")
