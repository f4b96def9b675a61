package streams

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// defaultContainerAnnotation names the container kubectl and the API
// pick when a request names none.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// copyBuffer is the size of the buffers streams are copied through: one
// per direction per stream, so that a slow reader holds back the writer
// (through the tunnel's flow control) rather than filling memory.
const copyBuffer = 32 << 10

// container returns the container of pod a request is for: name if the
// pod has it, else the only container, else the default-container
// annotation's; otherwise a 400 as upstream's.
func container(pod *corev1.Pod, name string) (string, error) {
	if name == "" {
		switch {
		case len(pod.Spec.Containers) == 1:
			return pod.Spec.Containers[0].Name, nil
		case pod.Annotations[defaultContainerAnnotation] != "":
			name = pod.Annotations[defaultContainerAnnotation]
		default:
			var names, inits []string
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			for _, c := range pod.Spec.InitContainers {
				inits = append(inits, c.Name)
			}
			msg := fmt.Sprintf("a container name must be specified for pod %s, choose one of: %s", pod.Name, names)
			if len(inits) > 0 {
				msg += fmt.Sprintf(" or one of the init containers: %s", inits)
			}
			return "", apierrors.NewBadRequest(msg)
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return name, nil
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return name, nil
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return name, nil
		}
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
}

// logOptions parses and checks the PodLogOptions of a query, as upstream
// validates them; errors are 400s.
func logOptions(q url.Values) (*corev1.PodLogOptions, error) {
	o := &corev1.PodLogOptions{Container: q.Get("container")}
	var err error
	boolean := func(name string, into *bool) {
		if v := q.Get(name); v != "" && err == nil {
			b, perr := strconv.ParseBool(v)
			if perr != nil {
				err = apierrors.NewBadRequest(fmt.Sprintf("%s: invalid boolean %q", name, v))
			}
			*into = b
		}
	}
	integer := func(name string) *int64 {
		v := q.Get(name)
		if v == "" || err != nil {
			return nil
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			err = apierrors.NewBadRequest(fmt.Sprintf("%s: invalid integer %q", name, v))
			return nil
		}
		return &n
	}
	boolean("follow", &o.Follow)
	boolean("previous", &o.Previous)
	boolean("timestamps", &o.Timestamps)
	boolean("insecureSkipTLSVerifyBackend", &o.InsecureSkipTLSVerifyBackend)
	o.SinceSeconds = integer("sinceSeconds")
	o.TailLines = integer("tailLines")
	o.LimitBytes = integer("limitBytes")
	if v := q.Get("sinceTime"); v != "" && err == nil {
		t, perr := time.Parse(time.RFC3339, v)
		if perr != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("sinceTime: invalid RFC3339 time %q", v))
		}
		o.SinceTime = &metav1.Time{Time: t}
	}
	if v := q.Get("stream"); v != "" {
		switch v {
		case corev1.LogStreamStdout, corev1.LogStreamStderr, corev1.LogStreamAll:
			o.Stream = &v
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("stream: Unsupported value: %q: supported values: %q, %q, %q", v, corev1.LogStreamAll, corev1.LogStreamStdout, corev1.LogStreamStderr))
		}
	}
	if err != nil {
		return nil, err
	}
	switch {
	case o.SinceSeconds != nil && o.SinceTime != nil:
		return nil, apierrors.NewBadRequest("at most one of sinceTime or sinceSeconds may be specified")
	case o.SinceSeconds != nil && *o.SinceSeconds < 1:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("sinceSeconds: Invalid value: %d: must be greater than 0", *o.SinceSeconds))
	case o.TailLines != nil && *o.TailLines < 0:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("tailLines: Invalid value: %d: must be greater than or equal to 0", *o.TailLines))
	case o.LimitBytes != nil && *o.LimitBytes < 1:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("limitBytes: Invalid value: %d: must be greater than 0", *o.LimitBytes))
	case o.Stream != nil && *o.Stream != corev1.LogStreamAll:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("stream: Unsupported value: %q: only %q is served", *o.Stream, corev1.LogStreamAll))
	}
	return o, nil
}

// serveLog serves pods/log: the node's log bytes as text/plain, flushed as
// they come, until the node ends the stream or the client goes.
func (s *Server) serveLog(w http.ResponseWriter, r *http.Request, pod *corev1.Pod) error {
	o, err := logOptions(r.URL.Query())
	if err != nil {
		return err
	}
	name, err := container(pod, o.Container)
	if err != nil {
		return err
	}
	params := []wire.Param{{Name: "container", Value: name}}
	params = boolParams(params, "follow", o.Follow)
	params = boolParams(params, "previous", o.Previous)
	params = boolParams(params, "timestamps", o.Timestamps)
	params = intParam(params, "tailLines", o.TailLines)
	params = intParam(params, "limitBytes", o.LimitBytes)
	params = intParam(params, "sinceSeconds", o.SinceSeconds)
	if o.SinceTime != nil {
		params = append(params, wire.Param{Name: "sinceTime", Value: o.SinceTime.UTC().Format(time.RFC3339)})
	}
	t, err := s.openTunnel(r.Context(), pod, "logs", params, nil)
	if err != nil {
		return err
	}
	defer t.Close()
	// The client going away ends the copy: closing the tunnel fails the
	// read it is blocked in.
	stop := context.AfterFunc(r.Context(), func() { t.Close() })
	defer stop()

	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, copyBuffer)
	var limit int64 = -1
	if o.LimitBytes != nil {
		limit = *o.LimitBytes // the node limits too; this keeps the promise
	}
	for limit != 0 {
		n, rerr := t.Read(buf)
		if limit > 0 && int64(n) > limit {
			n = int(limit)
		}
		if n > 0 {
			if limit > 0 {
				limit -= int64(n)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil
			}
			if ferr := rc.Flush(); ferr != nil {
				return nil
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if r.Context().Err() == nil {
				s.log.Debug("log stream from node ended", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName, "err", rerr)
			}
			return nil
		}
	}
	return nil
}
