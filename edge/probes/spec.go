package probes

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ErrInvalid is wrapped by the errors of ParseProbe and RunHandler for a
// probe or handler that cannot be run as written: no handler or two, a
// named port the container does not declare, a negative number. Running it
// again fails the same way.
var ErrInvalid = errors.New("invalid")

// Kubelet's defaults for a probe's fields left at zero (the API server
// applies them; a static pod's manifest may leave them out).
const (
	DefaultPeriod           = 10 * time.Second
	DefaultTimeout          = 1 * time.Second
	DefaultSuccessThreshold = 1
	DefaultFailureThreshold = 3
)

// Timing is when a probe runs and how its outcomes count, defaults applied.
type Timing struct {
	InitialDelay     time.Duration // after the container started, before the first probe
	Period           time.Duration // between the starts of two probes
	Timeout          time.Duration // of one probe
	SuccessThreshold int           // successes in a row that make a failed probe succeed
	FailureThreshold int           // failures in a row that make a succeeded probe fail
	// KillGrace is the probe's terminationGracePeriodSeconds, which
	// replaces the pod's when a liveness or startup failure kills the
	// container; KillGraceSet says whether the probe has one.
	KillGrace    time.Duration
	KillGraceSet bool
}

// ParseProbe checks probe p of kind k of container c and returns its
// timing. It returns an error wrapping ErrInvalid, saying what is wrong,
// for a probe kubelet's API validation would refuse or that cannot run: not
// exactly one handler, a port that is neither a number from 1 to 65535 nor
// the name of one of c's ports, a negative number, a successThreshold other
// than 1 for a liveness or startup probe, an empty exec command, a scheme
// other than HTTP or HTTPS, an HTTP header Go's client cannot send. Zero
// fields get kubelet's defaults.
func ParseProbe(k Kind, p *corev1.Probe, c *corev1.Container) (Timing, error) {
	if p == nil {
		return Timing{}, fmt.Errorf("%w %s probe: none given", ErrInvalid, k.lower())
	}
	t, err := parseProbe(k, p, c)
	if err != nil {
		return Timing{}, fmt.Errorf("%w %s probe: %s", ErrInvalid, k.lower(), err)
	}
	return t, nil
}

func parseProbe(k Kind, p *corev1.Probe, c *corev1.Container) (Timing, error) {
	if err := checkProbeHandler(&p.ProbeHandler, c); err != nil {
		return Timing{}, err
	}
	for _, f := range []struct {
		name string
		v    int32
	}{
		{"initialDelaySeconds", p.InitialDelaySeconds},
		{"periodSeconds", p.PeriodSeconds},
		{"timeoutSeconds", p.TimeoutSeconds},
		{"successThreshold", p.SuccessThreshold},
		{"failureThreshold", p.FailureThreshold},
	} {
		if f.v < 0 {
			return Timing{}, fmt.Errorf("%s is %d, must not be negative", f.name, f.v)
		}
	}
	t := Timing{
		InitialDelay:     time.Duration(p.InitialDelaySeconds) * time.Second,
		Period:           orDefault(time.Duration(p.PeriodSeconds)*time.Second, DefaultPeriod),
		Timeout:          orDefault(time.Duration(p.TimeoutSeconds)*time.Second, DefaultTimeout),
		SuccessThreshold: int(orDefault(p.SuccessThreshold, DefaultSuccessThreshold)),
		FailureThreshold: int(orDefault(p.FailureThreshold, DefaultFailureThreshold)),
	}
	if k != Readiness && t.SuccessThreshold != 1 {
		return Timing{}, fmt.Errorf("successThreshold is %d, must be 1 for a %s probe", t.SuccessThreshold, k.lower())
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && k != Readiness {
		// A readiness probe's is ignored: it kills nothing. The API
		// refuses it there anyway.
		if *g <= 0 {
			return Timing{}, fmt.Errorf("terminationGracePeriodSeconds is %d, must be positive", *g)
		}
		// Bounded so that the Duration does not overflow.
		t.KillGrace = time.Duration(min(*g, int64(100*365*24*3600))) * time.Second
		t.KillGraceSet = true
	}
	return t, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// checkProbeHandler says what is wrong with h as the handler of a probe of
// container c, or nil.
func checkProbeHandler(h *corev1.ProbeHandler, c *corev1.Container) error {
	var set []string
	if h.Exec != nil {
		set = append(set, "exec")
	}
	if h.HTTPGet != nil {
		set = append(set, "httpGet")
	}
	if h.TCPSocket != nil {
		set = append(set, "tcpSocket")
	}
	if h.GRPC != nil {
		set = append(set, "grpc")
	}
	if err := exactlyOne(set, "exec, httpGet, tcpSocket or grpc"); err != nil {
		return err
	}
	switch {
	case h.Exec != nil:
		return checkExec(h.Exec)
	case h.HTTPGet != nil:
		return checkHTTPGet(h.HTTPGet, c)
	case h.TCPSocket != nil:
		_, err := resolvePort(h.TCPSocket.Port, c)
		return err
	default:
		if p := h.GRPC.Port; p < 1 || p > 65535 {
			return fmt.Errorf("grpc port %d is not from 1 to 65535", p)
		}
		return nil
	}
}

// checkLifecycleHandler says what is wrong with h as a postStart or
// preStop hook of container c, or nil.
func checkLifecycleHandler(h *corev1.LifecycleHandler, c *corev1.Container) error {
	var set []string
	if h.Exec != nil {
		set = append(set, "exec")
	}
	if h.HTTPGet != nil {
		set = append(set, "httpGet")
	}
	if h.TCPSocket != nil {
		set = append(set, "tcpSocket")
	}
	if h.Sleep != nil {
		set = append(set, "sleep")
	}
	if err := exactlyOne(set, "exec, httpGet or sleep"); err != nil {
		return err
	}
	switch {
	case h.Exec != nil:
		return checkExec(h.Exec)
	case h.HTTPGet != nil:
		return checkHTTPGet(h.HTTPGet, c)
	case h.TCPSocket != nil:
		// Kept in the API for old objects only; kubelet fails it at run
		// time too.
		return errors.New("tcpSocket is not supported as a lifecycle hook")
	default:
		if s := h.Sleep.Seconds; s < 0 {
			return fmt.Errorf("sleep seconds is %d, must not be negative", s)
		}
		return nil
	}
}

func exactlyOne(set []string, choices string) error {
	switch len(set) {
	case 0:
		return fmt.Errorf("no handler, it needs one of %s", choices)
	case 1:
		return nil
	}
	return fmt.Errorf("%d handlers (%s), it needs exactly one", len(set), strings.Join(set, ", "))
}

func checkExec(e *corev1.ExecAction) error {
	if len(e.Command) == 0 {
		return errors.New("exec has no command")
	}
	return nil
}

func checkHTTPGet(g *corev1.HTTPGetAction, c *corev1.Container) error {
	if _, err := httpScheme(g.Scheme); err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		if !validHeaderName(h.Name) {
			return fmt.Errorf("HTTP header name %q is not a valid header name", h.Name)
		}
		if !validHeaderValue(h.Value) {
			return fmt.Errorf("HTTP header %s has a value with control characters", h.Name)
		}
	}
	_, err := resolvePort(g.Port, c)
	return err
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110: a
// token), which the API requires and Go's client sends.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		b := s[i]
		alnum := b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(b)) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s holds no control characters but tabs.
func validHeaderValue(s string) bool {
	for i := range len(s) {
		if b := s[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// httpScheme returns the URL scheme of s: "http" for "" or HTTP, "https"
// for HTTPS, in any case as kubelet lowercases it.
func httpScheme(s corev1.URIScheme) (string, error) {
	switch strings.ToLower(string(s)) {
	case "", "http":
		return "http", nil
	case "https":
		return "https", nil
	}
	return "", fmt.Errorf("scheme %q is neither HTTP nor HTTPS", s)
}

// resolvePort returns the port p names in container c: its number, or the
// containerPort of c's port of that name, or a string that is a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	var port int
	switch p.Type {
	case intstr.Int:
		port = int(p.IntVal)
	case intstr.String:
		found := false
		if c != nil {
			for _, cp := range c.Ports {
				if cp.Name == p.StrVal {
					port, found = int(cp.ContainerPort), true
					break
				}
			}
		}
		if !found {
			// Kubelet's last try: a number written as a string.
			n, err := strconv.Atoi(p.StrVal)
			if err != nil {
				if p.StrVal == "" {
					return 0, errors.New("port is empty")
				}
				return 0, fmt.Errorf("port %q is not the name of one of the container's ports", p.StrVal)
			}
			port = n
		}
	default:
		return 0, fmt.Errorf("port %v is neither a number nor a name", p)
	}
	if port < 1 || port > 65535 {
		return 0, fmt.Errorf("port %d is not from 1 to 65535", port)
	}
	return port, nil
}
