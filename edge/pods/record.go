package pods

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Record is what Plan keeps about one pod between calls: what the runtime
// does not say (back-offs, why a container waits, the run before the
// newest) and what must survive an agent restart. The caller persists it
// by pod UID with MarshalRecord. The zero Record is a pod Plan has not
// seen yet, or whose record was lost: Plan then derives what it can from
// the runtime.
type Record struct {
	// FirstSeen is when Plan first saw the pod desired: its startTime.
	FirstSeen time.Time `json:"firstSeen,omitzero"`
	// Grace is the pod's termination grace period, kept for when the pod
	// leaves desired without a graceful deletion.
	Grace time.Duration `json:"grace,omitzero"`
	// TerminatingSince is when Plan first stopped containers to end the
	// pod; sidecars get what is left of the grace period.
	TerminatingSince time.Time `json:"terminatingSince,omitzero"`
	// Terminal is set once the pod reached Succeeded or Failed; nothing
	// of it is started again.
	Terminal bool `json:"terminal,omitzero"`
	// Confirmed is set once Plan handed out ConfirmTerminated.
	Confirmed bool `json:"confirmed,omitzero"`
	// Rejected, set by the caller before the pod's first Plan, says the
	// node refused the pod, as kubelet's admission does (it does not fit
	// what the node has left): nothing of it starts, and its status is
	// Failed with the rejection's reason.
	Rejected *Rejection `json:"rejected,omitempty"`
	// Containers holds a record per container name, init and app alike.
	Containers map[string]ContainerRecord `json:"containers,omitempty"`
}

// Rejection is why the node refused a pod: a kubelet admission reason
// (OutOfcpu, OutOfmemory, OutOfpods, ...) and its message.
type Rejection struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// Evicted says the pod was admitted and the node then evicted it
	// under resource pressure, as kubelet's eviction manager does: what
	// runs of it is killed at once (no grace), and its status keeps its
	// containers' with phase Failed, Reason and Message as they are, and
	// a DisruptionTarget condition.
	Evicted bool `json:"evicted,omitzero"`
}

// ContainerRecord is what Plan keeps about one container of a pod.
type ContainerRecord struct {
	// Image is the image the back-offs apply to; a new image starts them
	// over, as kubelet keys its back-off by the container's spec.
	Image string `json:"image,omitempty"`
	// Attempt is the newest attempt known to have been created: the
	// container's restartCount.
	Attempt int `json:"attempt,omitzero"`
	// Created is set once an instance existed, so that a missing one was
	// lost by the runtime rather than never started.
	Created bool `json:"created,omitzero"`
	// LastTermination is how the run before the newest one ended (its
	// lastState), or nil.
	LastTermination *Termination `json:"lastTermination,omitempty"`
	// CrashBackOff delays restarts after the container exited.
	CrashBackOff BackOff `json:"crashBackOff,omitzero"`
	// StartBackOff delays retries of starts that failed (image pulls).
	StartBackOff BackOff `json:"startBackOff,omitzero"`
	// Reason and Message say why the container waits, as its status
	// shows it: CrashLoopBackOff, ErrImagePull, ImagePullBackOff,
	// CreateContainerConfigError, ... (kubelet's reason cache). A start
	// that succeeds clears them.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// StopAt and StopGrace record a stop handed out and not yet seen done.
	StopAt    time.Time     `json:"stopAt,omitzero"`
	StopGrace time.Duration `json:"stopGrace,omitzero"`
	// Replace is set when Plan stopped the container to replace it (its
	// image changed, or its state was unknown): it is started again
	// whatever the restart policy, without back-off.
	Replace bool `json:"replace,omitzero"`
}

// BackOff is one exponential back-off, as kubelet's flowcontrol.Backoff
// keeps it per container: the current delay and when it was last moved.
type BackOff struct {
	Delay time.Duration `json:"delay,omitzero"` // 0: none
	Since time.Time     `json:"since,omitzero"` // when Delay was last set
}

// Termination is how one run of a container ended.
type Termination struct {
	ExitCode    int32     `json:"exitCode"`
	Reason      string    `json:"reason,omitempty"`
	Message     string    `json:"message,omitempty"`
	StartedAt   time.Time `json:"startedAt,omitzero"`
	FinishedAt  time.Time `json:"finishedAt,omitzero"`
	ContainerID string    `json:"containerID,omitempty"`
}

// MaxRecordSize bounds an encoded Record; UnmarshalRecord refuses more.
const MaxRecordSize = 256 << 10

// maxMessage bounds each message a record keeps (kubelet bounds a
// termination message to 4 KiB; a waiting message is one line).
const maxMessage = 4 << 10

// ErrInvalidRecord is returned (wrapped) by UnmarshalRecord for data that
// is not a record: too large, not JSON of its shape, or with values out of
// range. The caller should drop the record; Plan rebuilds what it can.
var ErrInvalidRecord = errors.New("invalid pod record")

// MarshalRecord encodes r for storage.
func MarshalRecord(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode pod record: %w", err)
	}
	return b, nil
}

// UnmarshalRecord decodes a record MarshalRecord encoded. Unknown fields
// are ignored, so that an agent rolled back to an older release reads the
// records of a newer one.
func UnmarshalRecord(data []byte) (Record, error) {
	if len(data) > MaxRecordSize {
		return Record{}, fmt.Errorf("%w: %d bytes is over the %d-byte limit", ErrInvalidRecord, len(data), MaxRecordSize)
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("%w: data after the record", ErrInvalidRecord)
	}
	if err := r.validate(); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	return r, nil
}

func (r *Record) validate() error {
	if r.Grace < 0 {
		return fmt.Errorf("negative grace %v", r.Grace)
	}
	for name, c := range r.Containers {
		switch {
		case name == "":
			return errors.New("container without a name")
		case c.Attempt < 0:
			return fmt.Errorf("container %q: negative attempt %d", name, c.Attempt)
		case c.CrashBackOff.Delay < 0 || c.StartBackOff.Delay < 0 || c.StopGrace < 0:
			return fmt.Errorf("container %q: negative duration", name)
		}
	}
	return nil
}

// Clone returns a copy of r that shares no memory with it.
func (r Record) Clone() Record {
	if r.Rejected != nil {
		r.Rejected = new(*r.Rejected)
	}
	r.Containers = maps.Clone(r.Containers)
	for name, c := range r.Containers {
		if c.LastTermination != nil {
			c.LastTermination = new(*c.LastTermination)
			r.Containers[name] = c
		}
	}
	return r
}

// Equal reports whether r and o hold the same values.
func (r Record) Equal(o Record) bool {
	if !r.FirstSeen.Equal(o.FirstSeen) || r.Grace != o.Grace || !r.TerminatingSince.Equal(o.TerminatingSince) ||
		r.Terminal != o.Terminal || r.Confirmed != o.Confirmed || len(r.Containers) != len(o.Containers) ||
		(r.Rejected == nil) != (o.Rejected == nil) || r.Rejected != nil && *r.Rejected != *o.Rejected {
		return false
	}
	for name, a := range r.Containers {
		b, ok := o.Containers[name]
		if !ok || !a.equal(b) {
			return false
		}
	}
	return true
}

func (c ContainerRecord) equal(o ContainerRecord) bool {
	return c.Image == o.Image && c.Attempt == o.Attempt && c.Created == o.Created &&
		c.LastTermination.equal(o.LastTermination) &&
		c.CrashBackOff.equal(o.CrashBackOff) && c.StartBackOff.equal(o.StartBackOff) &&
		c.Reason == o.Reason && c.Message == o.Message &&
		c.StopAt.Equal(o.StopAt) && c.StopGrace == o.StopGrace && c.Replace == o.Replace
}

func (b BackOff) equal(o BackOff) bool { return b.Delay == o.Delay && b.Since.Equal(o.Since) }

func (t *Termination) equal(o *Termination) bool {
	if t == nil || o == nil {
		return t == o
	}
	return t.ExitCode == o.ExitCode && t.Reason == o.Reason && t.Message == o.Message &&
		t.StartedAt.Equal(o.StartedAt) && t.FinishedAt.Equal(o.FinishedAt) && t.ContainerID == o.ContainerID
}

// ErrContainerConfig marks errors in building a container's config: before
// the runtime is called, a configMap or secret key that is missing, an env
// value that cannot be resolved, a volume that cannot be set up; by the
// runtime, a spec the image contradicts. Observe reports an error wrapping
// it as CreateContainerConfigError. It is the runtime's sentinel.
var ErrContainerConfig = runtime.ErrContainerConfig

// Observe returns rec updated with the outcome of running action a, which
// Plan handed out for rec's pod; err is what running it returned. Only
// failed starts are recorded: the container waits with the error's reason
// (ErrImagePull; CreateContainerConfigError for ErrContainerConfig;
// CreateContainerError for runtime.ErrNotSupported and
// runtime.ErrCreateContainer; RunContainerError for anything else) and
// its next attempt backs off. A start that succeeds clears the reason. A
// start cut short by context cancellation is not a failure. The caller
// persists the result.
func Observe(rec Record, a Action, err error, now time.Time) Record {
	if a.Type != StartContainer || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return rec
	}
	now = now.UTC().Round(0)
	rec = rec.Clone()
	if rec.Containers == nil {
		rec.Containers = make(map[string]ContainerRecord)
	}
	cr := rec.Containers[a.Container]
	switch {
	case err == nil:
		cr.Reason, cr.Message = "", ""
		cr.Created = true
		cr.Attempt = max(cr.Attempt, a.Attempt)
	case errors.Is(err, runtime.ErrAlreadyRunning):
		// Something started it already; Plan learns which attempt from
		// the runtime.
		cr.Reason, cr.Message = "", ""
	default:
		switch {
		case errors.Is(err, runtime.ErrImagePull):
			cr.Reason = ReasonErrImagePull
		case errors.Is(err, ErrContainerConfig):
			cr.Reason = ReasonCreateContainerConfigError
		case errors.Is(err, runtime.ErrNotSupported), errors.Is(err, runtime.ErrCreateContainer):
			cr.Reason = ReasonCreateContainerError
		default:
			cr.Reason = ReasonRunContainerError
		}
		cr.Message = truncate(err.Error(), maxMessage)
		cr.Image = a.Spec.Image
		cr.StartBackOff = cr.StartBackOff.next(now, now)
	}
	rec.Containers[a.Container] = cr
	return rec
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
