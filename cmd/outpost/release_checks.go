package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// healthCheckSyntax is the syntax of --health-check, for its errors.
const healthCheckSyntax = "NAME:NAMESPACE/POD[/CONTAINER][:timeout=DURATION]:exec=COMMAND [ARG...] or NAME:NAMESPACE/POD[:timeout=DURATION]:http=PORT[/PATH]"

// healthCheckArg reads a --health-check argument:
//
//	NAME:NAMESPACE/POD[/CONTAINER][:timeout=DURATION]:exec=COMMAND [ARG...]
//	NAME:NAMESPACE/POD[:timeout=DURATION]:http=PORT[/PATH]
//
// exec's command and arguments are split on white space and run as they
// are, with no shell; a JSON list of strings (exec=["sh","-c","a b"]) gives
// arguments with spaces. http's path defaults to "/". The action comes
// last, so a command may hold colons.
func healthCheckArg(arg string) (manifest.HealthCheck, error) {
	bad := func(format string, a ...any) (manifest.HealthCheck, error) {
		return manifest.HealthCheck{}, fmt.Errorf("--health-check %q: %s; want %s", arg, fmt.Sprintf(format, a...), healthCheckSyntax)
	}
	name, rest, ok := strings.Cut(arg, ":")
	if !ok || name == "" {
		return bad("no NAME:")
	}
	target, action, ok := strings.Cut(rest, ":")
	if !ok {
		return bad("no action (exec= or http=) after the pod")
	}
	h := manifest.HealthCheck{Name: name}
	parts := strings.Split(target, "/")
	switch len(parts) {
	case 3:
		h.Container = parts[2]
		fallthrough
	case 2:
		h.Namespace, h.Pod = parts[0], parts[1]
	default:
		return bad("pod %q is not NAMESPACE/POD[/CONTAINER]", target)
	}
	if t, ok := strings.CutPrefix(action, "timeout="); ok {
		t, action, _ = strings.Cut(t, ":")
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d%time.Second != 0 {
			return bad("timeout %q is not a whole number of seconds such as 10s", t)
		}
		h.TimeoutSeconds = int(min(d/time.Second, manifest.MaxHealthCheckTimeoutSeconds+1))
	}
	switch {
	case strings.HasPrefix(action, "exec="):
		argv, err := execArgv(strings.TrimPrefix(action, "exec="))
		if err != nil {
			return bad("%v", err)
		}
		h.Exec = argv
	case strings.HasPrefix(action, "http="):
		if h.Container != "" {
			return bad("an http check names no container: it GETs the pod's IP")
		}
		port, path, _ := strings.Cut(strings.TrimPrefix(action, "http="), "/")
		n, err := strconv.Atoi(port)
		if err != nil {
			return bad("http port %q is not a number", port)
		}
		h.HTTP = &manifest.HTTPCheck{Port: n, Path: "/" + path}
	default:
		return bad("action %q is neither exec= nor http=", action)
	}
	if err := manifest.ValidateHealthChecks([]manifest.HealthCheck{h}); err != nil {
		return manifest.HealthCheck{}, fmt.Errorf("--health-check %q: %w", arg, err)
	}
	return h, nil
}

// execArgv splits an exec check's command: a JSON list of strings, or
// words separated by white space.
func execArgv(s string) ([]string, error) {
	if strings.HasPrefix(strings.TrimSpace(s), "[") {
		var argv []string
		if err := json.Unmarshal([]byte(s), &argv); err != nil {
			return nil, fmt.Errorf("exec %s is not a JSON list of strings: %v", s, err)
		}
		if len(argv) == 0 {
			return nil, fmt.Errorf("exec has no command")
		}
		return argv, nil
	}
	argv := strings.Fields(s)
	if len(argv) == 0 {
		return nil, fmt.Errorf("exec has no command")
	}
	return argv, nil
}

// healthCheckString is how a health check prints: its target and action.
func healthCheckString(h manifest.HealthCheck) (target, action string) {
	target = h.Namespace + "/" + h.Pod
	if h.Container != "" {
		target += "/" + h.Container
	}
	if h.HTTP != nil {
		return target, fmt.Sprintf("GET :%d%s", h.HTTP.Port, h.HTTP.Path)
	}
	b, _ := json.Marshal(h.Exec)
	return target, "exec " + string(b)
}
