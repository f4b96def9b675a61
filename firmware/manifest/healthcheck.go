package manifest

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Limits on a release's health checks.
const (
	// MaxHealthChecks is the most health checks a manifest may list.
	MaxHealthChecks = 16
	// MaxExecArgs is the most arguments (the command included) of an
	// exec check, and MaxExecBytes the most bytes of all of them.
	MaxExecArgs  = 32
	MaxExecBytes = 4096
	// MaxHTTPPathBytes is the longest path (with its query) of an HTTP
	// check.
	MaxHTTPPathBytes = 1024
	// DefaultHealthCheckTimeout is the timeout of a check that names
	// none; MaxHealthCheckTimeoutSeconds is the longest it may name.
	DefaultHealthCheckTimeout    = 5 * time.Second
	MaxHealthCheckTimeoutSeconds = 60
)

// SchemeHTTP is the one scheme an HTTP check may name.
const SchemeHTTP = "HTTP"

// HealthCheck is a check a node runs during the trial of the release:
// the node commits the release only while every check passes. It is run
// against a pod of the node, as an exec probe (a command in one of the
// pod's containers, passing when it exits with 0) or an HTTP probe (a GET
// of the pod's IP, passing with a status from 200 to 399), as kubelet runs
// exec and httpGet probes. Exactly one of Exec and HTTP is set.
type HealthCheck struct {
	// Name names the check in the node's status, a DNS label unique in
	// the release.
	Name string `json:"name"`
	// Namespace and Pod select the pods the check runs against: the
	// node's pods of Namespace named Pod, and those whose controller (the
	// owner reference with controller true) is named Pod, since every
	// node's copy of a DaemonSet's pod has a name of its own. A node
	// running no such pod skips the check: a rollout may cover nodes
	// that do not run the workload. Namespace is a DNS label, Pod a DNS
	// subdomain.
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Container is the container an exec check runs in, a DNS label;
	// empty for the pod's first container. An HTTP check has none.
	Container string `json:"container,omitempty"`
	// Exec is the command and its arguments, run as they are (no shell),
	// 1..MaxExecArgs of them, MaxExecBytes in all, the first not empty.
	Exec []string `json:"exec,omitempty"`
	// HTTP is a GET of the pod.
	HTTP *HTTPCheck `json:"http,omitempty"`
	// TimeoutSeconds bounds one run of the check: 0 for
	// DefaultHealthCheckTimeout, else 1..MaxHealthCheckTimeoutSeconds.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
}

// HTTPCheck is a GET of a pod's port: the pod's IP, or the node's
// loopback address for a pod on the host's network.
type HTTPCheck struct {
	// Port is the port number, 1..65535.
	Port int `json:"port"`
	// Path is the path and query of the request, starting with "/",
	// printable ASCII without spaces, at most MaxHTTPPathBytes.
	Path string `json:"path"`
	// Scheme is SchemeHTTP or empty, which means the same.
	Scheme string `json:"scheme,omitempty"`
}

// Timeout returns the timeout of one run of the check.
func (h *HealthCheck) Timeout() time.Duration {
	if h.TimeoutSeconds == 0 {
		return DefaultHealthCheckTimeout
	}
	return time.Duration(h.TimeoutSeconds) * time.Second
}

// ValidateHealthChecks checks a list of health checks as Validate does a
// manifest's, for tools that build one before they sign it.
func ValidateHealthChecks(hs []HealthCheck) error {
	if err := validateHealthChecks(hs); err != nil {
		return &Error{Reason: Invalid, Message: err.Error()}
	}
	return nil
}

// validateHealthChecks checks the health check list: its length, each
// check and unique names.
func validateHealthChecks(hs []HealthCheck) error {
	if len(hs) > MaxHealthChecks {
		return fmt.Errorf("%d health checks, want at most %d", len(hs), MaxHealthChecks)
	}
	names := make(map[string]bool, len(hs))
	for i := range hs {
		h := &hs[i]
		if err := h.validate(); err != nil {
			return fmt.Errorf("health check %d (%q): %w", i, h.Name, err)
		}
		if names[h.Name] {
			return fmt.Errorf("health check name %q is used twice", h.Name)
		}
		names[h.Name] = true
	}
	return nil
}

// validate checks one health check's fields.
func (h *HealthCheck) validate() error {
	if !isDNSLabel(h.Name) {
		return fmt.Errorf("name is not a DNS label")
	}
	if !isDNSLabel(h.Namespace) {
		return fmt.Errorf("namespace %q is not a DNS label", h.Namespace)
	}
	if !isDNSSubdomain(h.Pod) {
		return fmt.Errorf("pod %q is not a DNS subdomain", h.Pod)
	}
	if h.Container != "" && !isDNSLabel(h.Container) {
		return fmt.Errorf("container %q is not a DNS label", h.Container)
	}
	if h.TimeoutSeconds < 0 || h.TimeoutSeconds > MaxHealthCheckTimeoutSeconds {
		return fmt.Errorf("timeoutSeconds %d, want 1..%d or 0 for the default", h.TimeoutSeconds, MaxHealthCheckTimeoutSeconds)
	}
	switch {
	case h.Exec != nil && h.HTTP != nil:
		return fmt.Errorf("both exec and http: want one")
	case h.Exec != nil:
		return validateExec(h.Exec)
	case h.HTTP != nil:
		if h.Container != "" {
			return fmt.Errorf("container %q for an http check: the pod's IP is the pod's, not a container's", h.Container)
		}
		return h.HTTP.validate()
	}
	return fmt.Errorf("neither exec nor http: want one")
}

// validateExec checks an exec check's command.
func validateExec(argv []string) error {
	if len(argv) == 0 || len(argv) > MaxExecArgs {
		return fmt.Errorf("exec has %d arguments, want 1..%d", len(argv), MaxExecArgs)
	}
	if argv[0] == "" {
		return fmt.Errorf("exec command is empty")
	}
	n := 0
	for i, a := range argv {
		n += len(a)
		if n > MaxExecBytes {
			return fmt.Errorf("exec arguments over %d bytes", MaxExecBytes)
		}
		if !utf8.ValidString(a) {
			return fmt.Errorf("exec argument %d is not UTF-8", i)
		}
		for j := 0; j < len(a); j++ {
			if a[j] == 0 {
				return fmt.Errorf("exec argument %d has a NUL byte", i)
			}
		}
	}
	return nil
}

// validate checks an HTTP check's fields.
func (c *HTTPCheck) validate() error {
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("http port %d, want 1..65535", c.Port)
	}
	if c.Scheme != "" && c.Scheme != SchemeHTTP {
		return fmt.Errorf("http scheme %q, want %q", c.Scheme, SchemeHTTP)
	}
	if len(c.Path) == 0 || c.Path[0] != '/' || len(c.Path) > MaxHTTPPathBytes {
		return fmt.Errorf("http path %q, want 1..%d bytes starting with /", c.Path, MaxHTTPPathBytes)
	}
	for i := 0; i < len(c.Path); i++ {
		if c.Path[i] <= ' ' || c.Path[i] > '~' {
			return fmt.Errorf("http path %q has a byte %#x that is not printable ASCII", c.Path, c.Path[i])
		}
	}
	return nil
}

// isDNSSubdomain reports whether s is an RFC 1123 subdomain: at most 253
// bytes of DNS labels joined by dots, as Kubernetes object names are.
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if !isDNSLabel(s[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}
