// Package events words the Kubernetes Events the edge agent makes about
// its pods as kubelet does, and queues them for the hub, counting repeats
// into one series as kubelet's event correlator does. Events go up through
// the outbox like statuses but are not coalesced: the outbox keeps the
// latest of them while the hub is away, and a repeat is sent as its first
// event with a higher count, which the hub applies to the event it has.
package events

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Reasons, as kubelet's.
const (
	Started = "Started"
	Failed  = "Failed"
	Killing = "Killing"
	BackOff = "BackOff"

	FailedPostStartHook = "FailedPostStartHook"
	FailedPreStopHook   = "FailedPreStopHook"
)

// An event that repeats one of the last eventWindow (same object, type,
// reason and message) is counted on it rather than made anew, as kubelet's
// event correlator does: a crash loop is one BackOff event seen many
// times. The agent remembers up to maxEventSeries of them.
const (
	eventWindow    = 10 * time.Minute
	maxEventSeries = 1024
)

// eventKey identifies the events that repeat one another.
type eventKey struct {
	obj              corev1.ObjectReference
	typ, reason, msg string
}

// eventSeries is the event a repeat is counted on.
type eventSeries struct {
	name  string
	first metav1.Time
	last  time.Time
	count int32
}

// series returns the series the event of key at now belongs to, started
// anew if there is none within eventWindow, counting this one.
func (e *eventLog) series(key eventKey, now metav1.Time, name string) eventSeries {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byKey == nil {
		e.byKey = map[eventKey]*eventSeries{}
	}
	s := e.byKey[key]
	if s == nil || now.Sub(s.last) > eventWindow {
		if len(e.byKey) >= maxEventSeries {
			maps.DeleteFunc(e.byKey, func(_ eventKey, s *eventSeries) bool { return now.Sub(s.last) > eventWindow })
			if len(e.byKey) >= maxEventSeries {
				clear(e.byKey)
			}
		}
		s = &eventSeries{name: name, first: now}
		e.byKey[key] = s
	}
	s.count++
	s.last = now.Time
	return *s
}

// eventLog holds the agent's recent event series. Its methods are safe for
// concurrent use.
type eventLog struct {
	mu    sync.Mutex
	byKey map[eventKey]*eventSeries
}

// Outbox is where a Recorder queues its events: the checkpoint's.
type Outbox interface {
	Enqueue(kind wire.StatusKind, key wire.Key, object []byte) (seq uint64, err error)
}

// Recorder queues the node's Events about its pods for the hub. Its
// methods are safe for concurrent use.
type Recorder struct {
	node   string
	out    Outbox
	now    func() time.Time
	log    *slog.Logger
	series eventLog
}

// NewRecorder returns a Recorder for the pods of node that queues into
// out, reading the time from now and logging to log each Event it queued
// (at debug level, as kubelet logs them at verbosity 3) and what it could
// not queue.
func NewRecorder(node string, out Outbox, now func() time.Time, log *slog.Logger) *Recorder {
	return &Recorder{node: node, out: out, now: now, log: log}
}

// Pod queues an Event about container (or the whole pod, if "") of the
// pod of ref, whose spec pod is if the view still holds it (nil if not).
func (r *Recorder) Pod(ref runtime.PodRef, pod *corev1.Pod, container, typ, reason, msg string) {
	r.AnnotatedPod(ref, pod, container, nil, typ, reason, msg)
}

// AnnotatedPod is Pod with annotations on the Event, as kubelet's
// eviction manager annotates its Evicted events.
func (r *Recorder) AnnotatedPod(ref runtime.PodRef, pod *corev1.Pod, container string, annotations map[string]string, typ, reason, msg string) {
	now := metav1.NewTime(r.now())
	obj := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: k8stypes.UID(ref.UID)}
	if container != "" {
		obj.FieldPath = fmt.Sprintf("spec.containers{%s}", container)
		if pod != nil && slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == container }) {
			obj.FieldPath = fmt.Sprintf("spec.initContainers{%s}", container)
		}
	}
	r.record(obj, ref.Namespace, ref.Name, annotations, typ, reason, msg, now)
}

// Node queues an Event about the node itself, as kubelet records one on
// its node reference (in the default namespace, the node's name as UID).
func (r *Recorder) Node(typ, reason, msg string) {
	obj := corev1.ObjectReference{Kind: "Node", Name: r.node, UID: k8stypes.UID(r.node)}
	r.record(obj, metav1.NamespaceDefault, r.node, nil, typ, reason, msg, metav1.NewTime(r.now()))
}

// record queues kubelet's Event about obj, in namespace, named as kubelet
// names them after the object (prefix): unique by the time of the first
// of its series.
func (r *Recorder) record(obj corev1.ObjectReference, namespace, prefix string, annotations map[string]string, typ, reason, msg string, now metav1.Time) {
	s := r.series.series(eventKey{obj, typ, reason, msg}, now, fmt.Sprintf("%s.%x", prefix, now.UnixNano()))
	r.queue(&corev1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{Name: s.name, Namespace: namespace, Annotations: annotations},
		InvolvedObject:      obj,
		Reason:              reason,
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: "kubelet", Host: r.node},
		FirstTimestamp:      s.first,
		LastTimestamp:       now,
		Count:               s.count,
		ReportingController: "kubelet",
		ReportingInstance:   r.node,
	})
}

func (r *Recorder) queue(ev *corev1.Event) {
	raw, err := objects.Encode(ev)
	if err == nil {
		_, err = r.out.Enqueue(wire.KindEvent, wire.Key{Resource: wire.ResourceEvents, Namespace: ev.Namespace, Name: ev.Name}, raw)
	}
	if err == nil {
		r.log.Debug("event", "object", ev.InvolvedObject.Kind+" "+ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name,
			"type", ev.Type, "reason", ev.Reason, "message", ev.Message)
	} else {
		r.log.Warn("queue event", "object", ev.InvolvedObject.Kind+" "+ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name, "reason", ev.Reason, "err", err)
	}
}
