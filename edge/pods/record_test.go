package pods

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func sampleRecord() Record {
	return Record{
		FirstSeen:        t0,
		Grace:            30 * time.Second,
		TerminatingSince: t0.Add(time.Minute),
		Confirmed:        true,
		Containers: map[string]ContainerRecord{
			"main": {
				Image: "nginx", Attempt: 4, Created: true,
				LastTermination: &Termination{ExitCode: 1, Reason: "Error", Message: "boom", StartedAt: t0, FinishedAt: t0.Add(time.Second), ContainerID: "fake://1"},
				CrashBackOff:    BackOff{Delay: 40 * time.Second, Since: t0},
				StartBackOff:    BackOff{Delay: 10 * time.Second, Since: t0},
				Reason:          ReasonCrashLoopBackOff, Message: "back-off 40s",
				StopAt: t0, StopGrace: time.Second, Replace: true,
			},
			"init": {Image: "busybox", Created: true},
		},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []Record{{}, sampleRecord()} {
		b, err := MarshalRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalRecord(b)
		if err != nil {
			t.Fatalf("UnmarshalRecord(%s) = %v", b, err)
		}
		if !got.Equal(r) {
			t.Errorf("UnmarshalRecord(MarshalRecord(%+v)) = %+v", r, got)
		}
	}
	if b, _ := MarshalRecord(Record{}); string(b) != "{}" {
		t.Errorf("MarshalRecord(Record{}) = %s, want {}", b)
	}
}

func TestUnmarshalRecordRejects(t *testing.T) {
	for _, data := range []string{
		``,
		`null x`,
		`{} {}`,
		`[]`,
		`{"grace":-1}`,
		`{"containers":{"":{}}}`,
		`{"containers":{"c":{"attempt":-1}}}`,
		`{"containers":{"c":{"crashBackOff":{"delay":-5}}}}`,
		`{"containers":{"c":{"stopGrace":-5}}}`,
		`{"firstSeen":"yesterday"}`,
		`{"grace":"30s"}`,
		`{"containers":{"c":{"image":"` + strings.Repeat("x", MaxRecordSize) + `"}}}`,
	} {
		if _, err := UnmarshalRecord([]byte(data)); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("UnmarshalRecord(%.40q) = %v, want ErrInvalidRecord", data, err)
		}
	}
}

func TestUnmarshalRecordIgnoresUnknownFields(t *testing.T) {
	r, err := UnmarshalRecord([]byte(`{"grace":1000000000,"fromTheFuture":{"x":1},"containers":{"c":{"attempt":2,"new":true}}}`))
	if err != nil {
		t.Fatalf("UnmarshalRecord(newer record) = %v", err)
	}
	if r.Grace != time.Second || r.Containers["c"].Attempt != 2 {
		t.Errorf("UnmarshalRecord(newer record) = %+v, want grace 1s and attempt 2", r)
	}
}

func FuzzUnmarshalRecord(f *testing.F) {
	b, _ := MarshalRecord(sampleRecord())
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"containers":{"c":{"attempt":1,"lastTermination":{"exitCode":3}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := UnmarshalRecord(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("UnmarshalRecord(%q) = %v, want an ErrInvalidRecord", data, err)
			}
			return
		}
		b, err := MarshalRecord(r)
		if err != nil {
			t.Fatalf("MarshalRecord(UnmarshalRecord(%q)) = %v", data, err)
		}
		r2, err := UnmarshalRecord(b)
		if err != nil {
			t.Fatalf("UnmarshalRecord(%s) = %v after a round trip", b, err)
		}
		b2, _ := MarshalRecord(r2)
		if !bytes.Equal(b, b2) || !r.Equal(r2) {
			t.Fatalf("round trip of %q: %s, then %s", data, b, b2)
		}
		// Whatever a record holds, Plan and Status take it.
		pod := testPod("web")
		act := actualOfPod(pod, exited("main", 1, 1, t0))
		for _, now := range []time.Time{t0, t0.Add(time.Hour)} {
			Plan(nil, []runtime.PodStatus{act}, map[string]Record{"uid-web": r}, nil, now)
			d := Plan([]*corev1.Pod{pod}, []runtime.PodStatus{act}, map[string]Record{"uid-web": r}, nil, now)
			for _, pd := range d.Pods {
				if _, err := MarshalRecord(pd.Record); err != nil {
					t.Fatalf("MarshalRecord(Plan's record from %q) = %v", data, err)
				}
			}
			Status(pod, &act, r, nil, now)
		}
	})
}

func TestObserve(t *testing.T) {
	now := t0.Add(time.Hour)
	start := Action{Type: StartContainer, Container: "main", Spec: runtime.ContainerSpec{Name: "main", Image: "nginx"}, Attempt: 2}
	tests := []struct {
		err  error
		want string
	}{
		{nil, "reason= attempt=2 created=true backoff=0s"},
		{fmt.Errorf("start: %w", runtime.ErrAlreadyRunning), "reason= attempt=0 created=false backoff=0s"},
		{fmt.Errorf("pull image \"nginx\": %w: not found", runtime.ErrImagePull), "reason=ErrImagePull attempt=0 created=false backoff=10s"},
		{fmt.Errorf("configmap \"app\" not found: %w", ErrContainerConfig), "reason=CreateContainerConfigError attempt=0 created=false backoff=10s"},
		{fmt.Errorf("seccomp: %w", runtime.ErrNotSupported), "reason=CreateContainerError attempt=0 created=false backoff=10s"},
		{fmt.Errorf("image user: %w", runtime.ErrCreateContainer), "reason=CreateContainerError attempt=0 created=false backoff=10s"},
		{errors.New("exec format error"), "reason=RunContainerError attempt=0 created=false backoff=10s"},
		{context.Canceled, "reason= attempt=0 created=false backoff=0s"},
	}
	for _, tt := range tests {
		rec := Observe(Record{}, start, tt.err, now)
		c := rec.Containers["main"]
		got := fmt.Sprintf("reason=%s attempt=%d created=%v backoff=%v", c.Reason, c.Attempt, c.Created, c.StartBackOff.Delay)
		if got != tt.want {
			t.Errorf("Observe(start, %v) = %s, want %s", tt.err, got, tt.want)
		}
		if tt.err != nil && c.Reason != "" && c.Message != tt.err.Error() {
			t.Errorf("Observe(start, %v).Message = %q, want the error's text", tt.err, c.Message)
		}
	}

	// A second failure doubles the back-off; a success clears the reason
	// but keeps the back-off, as kubelet's does.
	rec := Observe(Record{}, start, runtime.ErrImagePull, now)
	rec = Observe(rec, start, runtime.ErrImagePull, now.Add(10*time.Second))
	if d := rec.Containers["main"].StartBackOff.Delay; d != 20*time.Second {
		t.Errorf("Observe(two pull failures) back-off = %v, want 20s", d)
	}
	rec = Observe(rec, start, nil, now.Add(30*time.Second))
	if c := rec.Containers["main"]; c.Reason != "" || c.StartBackOff.Delay != 20*time.Second {
		t.Errorf("Observe(success) = %+v, want no reason and the back-off kept", c)
	}

	// Other actions change nothing; the record passed in is not changed.
	orig := sampleRecord()
	for _, typ := range []ActionType{StopContainer, RemovePod, ConfirmTerminated} {
		if got := Observe(orig, Action{Type: typ, Container: "main"}, errors.New("x"), now); !got.Equal(orig) {
			t.Errorf("Observe(%v, error) changed the record", typ)
		}
	}
	Observe(orig, start, runtime.ErrImagePull, now)
	if !orig.Equal(sampleRecord()) {
		t.Errorf("Observe changed the record passed in")
	}

	long := strings.Repeat("é", maxMessage)
	if m := Observe(Record{}, start, errors.New(long), now).Containers["main"].Message; len(m) > maxMessage || !strings.HasPrefix(long, m) {
		t.Errorf("Observe(long error).Message has %d bytes, want at most %d, cut on a rune", len(m), maxMessage)
	}
}
