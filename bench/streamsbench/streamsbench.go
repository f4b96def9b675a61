// Package streamsbench measures what users feel of the streams the hub
// carries to pods on nodes behind NAT: kubectl port-forward, exec and
// logs -f, each through the hub and the node's QUIC session, on a real
// edge node with containerd. A hub and one agent run as child processes in
// a network namespace of the benchmark's own (see bench/edgenode); the
// benchmark is the client, with client-go's SPDY and WebSocket dialers as
// kubectl 1.27 and 1.33 use them, and reaches the pod's IP directly over
// the node's bridge for the baseline every port-forward figure is set
// against in the same run. It backs `outpost bench streams`.
package streamsbench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/internal/ociimage"
)

// Protocols of the client, as kubectl speaks them: SPDY (kubectl 1.27 and
// older) and WebSocket (1.30 and later: v5.channel.k8s.io for exec,
// SPDY tunnelled in WebSocket for port-forward).
const (
	ProtoSPDY      = "spdy"
	ProtoWebSocket = "websocket"
)

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Binary is the outpost binary run as `Binary hub ...`. Required.
	Binary string `json:"-"`
	// EdgeBinary is the outpost-edge binary the agent runs as. Required.
	EdgeBinary string `json:"-"`
	// ContainerdBinary is the containerd the agent starts:
	// /usr/bin/containerd.
	ContainerdBinary string `json:"containerd_binary"`
	// Dir is the parent of the run's temporary directory; "" means
	// os.TempDir(). The containerd sockets live there, so keep it short.
	Dir string `json:"dir,omitempty"`
	// LogDir, unless "", receives the agent's log as agent.log; ""
	// keeps it in the run's directory, removed at the end.
	LogDir string `json:"-"`
	// Namespace holds the pods: "streams".
	Namespace string `json:"namespace"`
	// Protocols are the client protocols measured: spdy, websocket.
	Protocols []string `json:"protocols"`

	// BulkBytes is the size of the file fetched over HTTP for
	// throughput: 64 MiB.
	BulkBytes int `json:"bulk_bytes"`
	// BulkRuns is how many times each path fetches it; the median is
	// the path's throughput: 5.
	BulkRuns int `json:"bulk_runs"`
	// Requests is how many small HTTP requests each path makes, each on
	// a connection of its own (busybox httpd closes it): 200.
	Requests int `json:"requests"`
	// Echoes is how many lines each path sends through one open TCP
	// connection to an echo server and waits to have back: 500.
	Echoes int `json:"echoes"`
	// Execs is how many `exec true` each protocol runs, one after
	// another: 30.
	Execs int `json:"execs"`
	// Keystrokes is how many lines each protocol sends through one
	// `exec -i cat` and waits to have echoed: 200.
	Keystrokes int `json:"keystrokes"`
	// LogLines is how many lines the log pod writes while followed, one
	// every LogInterval: 100, 50ms.
	LogLines    int           `json:"log_lines"`
	LogInterval time.Duration `json:"log_interval_ns"`

	// ReadyTimeout bounds the wait for the hub to be ready: 60s.
	ReadyTimeout time.Duration `json:"ready_timeout_ns"`
	// JoinTimeout bounds the wait for the node to be Ready with a pod
	// CIDR, and the image import: 2m.
	JoinTimeout time.Duration `json:"join_timeout_ns"`
	// PodTimeout bounds the wait for the pods to run and be Ready: 2m.
	PodTimeout time.Duration `json:"pod_timeout_ns"`
	// OpTimeout bounds each fetch, request, exec or line: 2m.
	OpTimeout time.Duration `json:"op_timeout_ns"`
	// StopTimeout is how long the hub and the agent get to exit after
	// SIGTERM before they are killed: 30s.
	StopTimeout time.Duration `json:"stop_timeout_ns"`
}

// DefaultConfig returns the defaults above. Binary and EdgeBinary are left
// empty.
func DefaultConfig() Config {
	return Config{
		ContainerdBinary: "/usr/bin/containerd",
		Namespace:        "streams",
		Protocols:        []string{ProtoSPDY, ProtoWebSocket},
		BulkBytes:        64 << 20,
		BulkRuns:         5,
		Requests:         200,
		Echoes:           500,
		Execs:            30,
		Keystrokes:       200,
		LogLines:         100,
		LogInterval:      50 * time.Millisecond,
		ReadyTimeout:     60 * time.Second,
		JoinTimeout:      2 * time.Minute,
		PodTimeout:       2 * time.Minute,
		OpTimeout:        2 * time.Minute,
		StopTimeout:      30 * time.Second,
	}
}

// QuickConfig returns DefaultConfig scaled down for a fast look; its
// figures are rough.
func QuickConfig() Config {
	c := DefaultConfig()
	c.BulkBytes = 16 << 20
	c.BulkRuns = 3
	c.Requests = 30
	c.Echoes = 100
	c.Execs = 10
	c.Keystrokes = 50
	c.LogLines = 30
	return c
}

// maxBulk bounds BulkBytes: the file lives in the pod's writable layer,
// on the machine's disk.
const maxBulk = 1 << 30

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.EdgeBinary == "":
		return errors.New("no outpost-edge binary to run the agent with")
	case c.ContainerdBinary == "":
		return errors.New("no containerd binary")
	case c.Namespace == "":
		return errors.New("namespace is empty")
	case len(c.Protocols) == 0:
		return errors.New("no protocol to measure")
	case c.BulkBytes < 1<<20 || c.BulkBytes > maxBulk:
		return fmt.Errorf("bulk size %d is outside 1 MiB..1 GiB", c.BulkBytes)
	case c.BulkRuns < 1 || c.Requests < 1 || c.Echoes < 1 || c.Execs < 1 || c.Keystrokes < 1 || c.LogLines < 1:
		return errors.New("every count must be at least 1")
	case c.LogInterval <= 0:
		return errors.New("log interval must be positive")
	case c.ReadyTimeout <= 0 || c.JoinTimeout <= 0 || c.PodTimeout <= 0 || c.OpTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("timeouts must be positive")
	}
	for i, p := range c.Protocols {
		if p != ProtoSPDY && p != ProtoWebSocket {
			return fmt.Errorf("protocol %q: want %s or %s", p, ProtoSPDY, ProtoWebSocket)
		}
		if slices.Contains(c.Protocols[:i], p) {
			return fmt.Errorf("protocol %q given twice", p)
		}
	}
	return nil
}

// ErrNotRoot is returned by Check when the benchmark does not run as
// root: a real pod needs network namespaces, cgroups and mounts.
var ErrNotRoot = errors.New("the streams benchmark runs a real pod and needs root (network namespaces, cgroups, mounts)")

// Check reports what this machine lacks to run the benchmark with c:
// root, the binaries, containerd's runc shim and runc, or Debian's
// busybox-static (the pods' image is made from it).
func Check(c Config) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	for _, bin := range []string{c.ContainerdBinary, c.Binary, c.EdgeBinary} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("need %s: %w", bin, err)
		}
	}
	for _, bin := range []string{"containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("need %s (Debian's containerd and runc): %w", bin, err)
		}
	}
	if _, err := os.Stat(ociimage.BusyboxPath); err != nil {
		return ociimage.ErrNoBusybox
	}
	return nil
}
