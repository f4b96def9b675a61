package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// ErrImageNeverPull is returned, wrapped with runtime.ErrImagePull, by
// Pull with runtime.PullNever for an image that is not present
// (kubelet's ErrImageNeverPull).
var ErrImageNeverPull = errors.New("image not present with pull policy Never")

// PullError is the error of a Pull that could not have the image. It
// wraps runtime.ErrImagePull and the cause: ErrImageNeverPull,
// ErrInvalidImageName, or containerd's error (errdefs.ErrNotFound for an
// image the registry does not have).
type PullError struct {
	Ref string // as given to Pull
	// Reason says why, for the container's status: the normalized name
	// and the registry's own message when it gave one ("manifest
	// unknown", "unauthorized: authentication required"), else the
	// error of the connection.
	Reason string
	Err    error
}

func (e *PullError) Error() string   { return runtime.ErrImagePull.Error() + ": " + e.Reason }
func (e *PullError) Unwrap() []error { return []error{runtime.ErrImagePull, e.Err} }

// Pull returns the image ref names, pulled and unpacked into the
// snapshotter as policy says, the way kubelet's image manager does:
//
//   - PullIfNotPresent (or ""): the local image if there is one, else
//     pulled;
//   - PullAlways: pulled, even when present; a registry that cannot be
//     reached fails the pull whatever is local;
//   - PullNever: the local image, or ErrImageNeverPull.
//
// ref is read as Docker does ("busybox" is
// "docker.io/library/busybox:latest"); the result's Name is the
// normalized name, and Name()+"@"+Target().Digest the image's ID as
// container statuses show it. The result's methods want a ctx in the
// Service's namespace. Of creds, those for the image's registry are
// tried in turn, as kubelet matches them (host labels with globs, port,
// repository path prefix), the most specific first; with none the pull
// is anonymous. Concurrent pulls of one reference with the same
// credentials are made once. Whatever Pull returns is marked used now
// (LabelLastUsed). Errors other than ctx's and containerd's own are a
// *PullError.
func (s *Service) Pull(ctx context.Context, ref string, policy runtime.PullPolicy, creds []runtime.Credential) (client.Image, error) {
	name, err := Normalize(ref)
	if err != nil {
		return nil, &PullError{Ref: ref, Reason: err.Error(), Err: err}
	}
	ctx = s.ctx(ctx)
	switch policy {
	case "", runtime.PullIfNotPresent, runtime.PullNever:
		img, err := s.present(ctx, name)
		if err == nil {
			return img, nil
		}
		if !errdefs.IsNotFound(err) {
			return nil, err
		}
		if policy == runtime.PullNever {
			return nil, &PullError{Ref: ref, Err: ErrImageNeverPull,
				Reason: fmt.Sprintf("container image %q is not present with pull policy of Never", ref)}
		}
	case runtime.PullAlways:
	default:
		return nil, fmt.Errorf("%w: pull policy %q", runtime.ErrNotSupported, policy)
	}
	matched := matchCredentials(name, creds)
	return s.coalesce(ctx, flightKey(name, matched), func(ctx context.Context) (client.Image, error) {
		return s.pullRemote(ctx, ref, name, matched)
	})
}

// present returns the local image name, unpacked (it unpacks an image
// whose content is present but not unpacked) and marked used; an error
// satisfying errdefs.IsNotFound when it or its content is not there.
func (s *Service) present(ctx context.Context, name string) (client.Image, error) {
	rec, err := s.c.ImageService().Get(ctx, name)
	if err != nil {
		return nil, err
	}
	img := client.NewImageWithPlatform(s.c, rec, s.platform)
	ok, err := img.IsUnpacked(ctx, s.cfg.Snapshotter)
	if err != nil {
		return nil, err
	}
	if !ok {
		if err := img.Unpack(ctx, s.cfg.Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", name, err)
		}
	}
	if err := s.touch(ctx, name, s.now()); err != nil {
		return nil, err
	}
	return img, nil
}

// flightKey is what makes two pulls the same: the name and the
// credentials that will be tried.
func flightKey(name string, creds []*runtime.Credential) string {
	h := sha256.New()
	for _, c := range creds {
		fmt.Fprintf(h, "%q %q %q %q\n", c.Registry, c.Username, c.Password, c.IdentityToken)
	}
	return name + " " + hex.EncodeToString(h.Sum(nil))
}

// flight is a pull under way, which pulls of the same key wait for.
type flight struct {
	done    chan struct{}
	waiters int // pulls waiting for it, for tests
	img     client.Image
	err     error
	aborted bool // the pulling caller's ctx ended: waiters try again
}

// coalesce runs fn for key unless a call for key is under way, in which
// case it waits for that one's result. fn runs in the caller's goroutine
// and with its ctx; when that ctx ends first, a waiter whose own ctx has
// not ended runs fn itself.
func (s *Service) coalesce(ctx context.Context, key string, fn func(context.Context) (client.Image, error)) (client.Image, error) {
	for {
		s.mu.Lock()
		f, ok := s.flights[key]
		if ok {
			f.waiters++
			s.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				s.mu.Lock()
				f.waiters--
				s.mu.Unlock()
				return nil, ctx.Err()
			}
			if f.aborted && ctx.Err() == nil {
				continue
			}
			return f.img, f.err
		}
		f = &flight{done: make(chan struct{})}
		s.flights[key] = f
		s.mu.Unlock()

		f.img, f.err = fn(ctx)
		f.aborted = ctx.Err() != nil
		s.mu.Lock()
		delete(s.flights, key)
		s.mu.Unlock()
		close(f.done)
		return f.img, f.err
	}
}

// pullRemote pulls name from its registry with each of creds in turn
// until one works (anonymously if there are none), as kubelet does.
func (s *Service) pullRemote(ctx context.Context, ref, name string, creds []*runtime.Credential) (client.Image, error) {
	if len(creds) == 0 {
		creds = []*runtime.Credential{nil}
	}
	var err error
	for _, c := range creds {
		var img client.Image
		if img, err = s.pullOnce(ctx, ref, name, c); err == nil {
			return img, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, err
}

// pullOnce pulls name with cred (nil: anonymously), keeping the labels a
// record of that name has and marking it used.
func (s *Service) pullOnce(ctx context.Context, ref, name string, cred *runtime.Credential) (client.Image, error) {
	labels := map[string]string{}
	if rec, err := s.c.ImageService().Get(ctx, name); err == nil {
		maps.Copy(labels, rec.Labels)
	}
	labels[LabelLastUsed] = s.now().UTC().Format(time.RFC3339Nano)
	d := &diagnosis{}
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: s.hosts(cred, d)})
	opts := []client.RemoteOpt{
		client.WithResolver(resolver),
		client.WithPullUnpack,
		client.WithPullSnapshotter(s.cfg.Snapshotter),
		client.WithPullLabels(labels),
	}
	if s.cfg.Site != nil {
		opts = append(opts, client.WithImageHandlerWrapper(s.siteDone))
	}
	img, err := s.c.Pull(ctx, name, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.pullError(ref, name, cred, d, err)
	}
	s.log.Info("pulled image", "image", name, "digest", img.Target().Digest)
	return img, nil
}

// siteDone wraps a pull's handler of each piece of content, which
// fetches it and has containerd commit it, to tell the Site when the
// pull is done with it (Site.Done).
func (s *Service) siteDone(h images.Handler) images.Handler {
	return images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		children, err := h.Handle(ctx, desc)
		s.cfg.Site.Done(desc.Digest)
		return children, err
	})
}

// pullError explains a failed pull: the registry's message if it sent
// one, what to do if the cause is one the node's owner can fix.
func (s *Service) pullError(ref, name string, cred *runtime.Credential, d *diagnosis, err error) *PullError {
	why := d.message()
	if why == "" {
		why = strings.TrimPrefix(err.Error(), fmt.Sprintf("failed to resolve reference %q: ", name))
	}
	host, port, _, _ := splitRef(name)
	registry := host
	if port != "" {
		registry += ":" + port
	}
	var hint string
	switch {
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") && !s.insecure[registry]:
		hint = "the registry " + registry + " speaks plain HTTP: list it in the node's insecure registries to allow that"
	case errors.Is(err, docker.ErrInvalidAuthorization) || strings.Contains(why, "unauthorized") || strings.Contains(err.Error(), "401 Unauthorized"):
		if cred == nil {
			hint = "no credentials for " + registry + " in the pod's image pull secrets"
		} else {
			hint = "the credentials for " + cred.Registry + " were refused"
		}
	}
	reason := name + ": " + why
	if hint != "" {
		reason += " (" + hint + ")"
	}
	return &PullError{Ref: ref, Reason: reason, Err: err}
}

// hosts returns how the resolver reaches a registry: docker.io at
// registry-1.docker.io, everything over HTTPS with verification except
// the insecure registries, sending cred when asked. d collects the
// registry's error messages.
func (s *Service) hosts(cred *runtime.Credential, d *diagnosis) docker.RegistryHosts {
	return func(host string) ([]docker.RegistryHost, error) {
		rt := s.secureRT
		if s.insecure[strings.ToLower(host)] {
			rt = docker.NewHTTPFallback(s.insecureRT)
		}
		hc := &http.Client{Transport: &diagTransport{rt: rt, d: d, anonymous: cred == nil}}
		endpoint := host
		if host == "docker.io" {
			endpoint = "registry-1.docker.io"
		}
		auth := docker.NewDockerAuthorizer(docker.WithAuthClient(hc), docker.WithAuthCreds(func(string) (string, string, error) {
			switch {
			case cred == nil:
				return "", "", nil
			case cred.IdentityToken != "":
				return "", cred.IdentityToken, nil // a refresh token, as containerd's CRI passes it
			}
			return cred.Username, cred.Password, nil
		}))
		origin := docker.RegistryHost{
			Client: hc, Authorizer: auth, Host: endpoint, Scheme: "https", Path: "/v2",
			Capabilities: docker.HostCapabilityPull | docker.HostCapabilityResolve,
		}
		if s.cfg.Site == nil {
			return []docker.RegistryHost{origin}, nil
		}
		// The site first, for content by digest: containerd's fetcher
		// tries the next host when one answers other than 2xx.
		origin.Client = &http.Client{Transport: s.cfg.Site.Origin(hc.Transport)}
		return []docker.RegistryHost{s.cfg.Site.Host(), origin}, nil
	}
}

// insecureTransport is the transport to insecure registries: TLS
// without verification (NewHTTPFallback adds plain HTTP).
func insecureTransport() *http.Transport {
	return docker.DefaultHTTPTransport(&tls.Config{InsecureSkipVerify: true})
}

// maxErrorBody bounds the bytes of a registry's error response read for
// its message.
const maxErrorBody = 64 << 10

// diagnosis is the first error message a registry gave during a pull.
type diagnosis struct {
	mu  sync.Mutex
	msg string
}

func (d *diagnosis) message() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.msg
}

func (d *diagnosis) note(body []byte) {
	msg := registryMessage(body)
	if msg == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.msg == "" {
		d.msg = msg
	}
}

// registryMessage returns the errors of a registry's error body
// (distribution's {"errors": [{"code", "message"}]}) as the docker CLI
// prints them, "unauthorized: authentication required", or "".
func registryMessage(body []byte) string {
	var e struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	var msgs []string
	for _, x := range e.Errors {
		code := strings.ToLower(strings.ReplaceAll(x.Code, "_", " "))
		switch {
		case x.Message == "" && code == "":
			continue
		case x.Message == "" || strings.EqualFold(x.Message, code):
			msgs = append(msgs, code)
		case code == "":
			msgs = append(msgs, x.Message)
		default:
			msgs = append(msgs, code+": "+x.Message)
		}
	}
	return strings.Join(msgs, "; ")
}

// diagTransport notes the registry's error messages: from the bodies of
// GETs that failed for good, and, since a HEAD has no body, from a GET
// made again for a manifest HEAD that did (not found, or unauthorized).
type diagTransport struct {
	rt        http.RoundTripper
	d         *diagnosis
	anonymous bool // the pull sends no credentials
}

func (t *diagTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	// A 401 is final when credentials were sent, or when none will be:
	// a basic challenge to an anonymous pull. Otherwise it starts the
	// authorizer's dance, and says nothing of how the pull will end.
	final := resp.StatusCode != http.StatusUnauthorized ||
		req.Header.Get("Authorization") != "" || t.anonymous && basicChallenge(resp)
	switch {
	case !final:
	case req.Method == http.MethodGet:
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		t.d.note(b)
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(b), &errReader{rerr}, resp.Body), resp.Body}
	case req.Method == http.MethodHead && strings.Contains(req.URL.Path, "/manifests/") &&
		(resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusUnauthorized) && t.d.message() == "":
		get := req.Clone(req.Context())
		get.Method = http.MethodGet
		if r2, err := t.rt.RoundTrip(get); err == nil {
			b, _ := io.ReadAll(io.LimitReader(r2.Body, maxErrorBody))
			r2.Body.Close()
			if r2.StatusCode >= 400 {
				t.d.note(b)
			}
		}
	}
	return resp, nil
}

func basicChallenge(resp *http.Response) bool {
	for _, h := range resp.Header.Values("WWW-Authenticate") {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(h)), "basic") {
			return true
		}
	}
	return false
}

type readCloser struct {
	io.Reader
	io.Closer
}

// errReader returns err (nil: io.EOF) once the bytes before it are read.
type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) {
	if r.err == nil {
		return 0, io.EOF
	}
	return 0, r.err
}
