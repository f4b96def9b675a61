package ociimage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// RegistryBinary is Debian's docker-registry (package docker-registry),
// the registry the tests serve their images from on loopback.
const RegistryBinary = "docker-registry"

// ErrNoRegistry is returned by StartRegistry when docker-registry is not
// installed.
var ErrNoRegistry = errors.New("docker-registry not found: install Debian's docker-registry")

// Registry is a docker-registry process serving on loopback over plain
// HTTP, for tests and benchmarks. Stop it with Close.
type Registry struct {
	Addr string // host:port
	cmd  *exec.Cmd
	done chan struct{}
}

// URL returns the registry's base URL.
func (r *Registry) URL() string { return "http://" + r.Addr }

// StartRegistry starts a registry keeping its blobs under dir, on a free
// loopback port, and returns once it answers. With user set, it asks for
// basic auth with that user and password (an htpasswd file under dir).
func StartRegistry(ctx context.Context, dir, user, password string) (*Registry, error) {
	bin, err := exec.LookPath(RegistryBinary)
	if err != nil {
		return nil, ErrNoRegistry
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	auth := ""
	if user != "" {
		h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(file, []byte(user+":"+string(h)+"\n"), 0o600); err != nil {
			return nil, err
		}
		auth = "auth:\n  htpasswd:\n    realm: outpost-test\n    path: " + strconv.Quote(file) + "\n"
	}
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %q\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n%s",
		filepath.Join(dir, "data"), addr, auth)
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, "serve", cfgFile)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	r := &Registry{Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(r.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			return r, nil
		}
		select {
		case <-r.done:
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			return nil, fmt.Errorf("registry exited: %s", b)
		case <-ctx.Done():
			r.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Close()
			return nil, fmt.Errorf("registry at %s did not answer within 20s", addr)
		}
	}
}

// Close stops the registry and waits for it to exit. It is safe to call
// twice.
func (r *Registry) Close() error {
	select {
	case <-r.done:
		return nil
	default:
	}
	r.cmd.Process.Kill()
	<-r.done
	return nil
}
