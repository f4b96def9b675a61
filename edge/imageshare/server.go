package imageshare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Content is the part of containerd's content store the Server reads:
// content.Store satisfies it. Its methods must be safe for concurrent
// use.
type Content interface {
	Info(ctx context.Context, dgst digest.Digest) (content.Info, error)
	ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error)
}

var _ Content = content.Store(nil)

// Files is a second source of the blobs a Server serves, after its
// Content: whole files named by their sha256 digest, such as the node's
// over-the-air artifacts. Its methods must be safe for concurrent use.
type Files interface {
	// OpenBlob returns blob d, complete, which the caller closes; an
	// error wrapping fs.ErrNotExist when the node does not hold it.
	OpenBlob(d digest.Digest) (io.ReadSeekCloser, error)
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Identity is the node's certificate, which the Server presents,
	// and the hub CA, whose node certificates it requires of clients.
	Identity Identity
	// Allowed says whether a node, by name, may read: a site peer.
	// Non-nil.
	Allowed func(node string) bool
	// Content is the node's containerd content store; non-nil.
	Content Content
	// Namespace is the containerd namespace of the node's images.
	Namespace string
	// Files, if not nil, serves the blobs Content does not hold, with
	// Range requests, so that a peer can resume a fetch.
	Files Files
	// Pulling says whether the node is fetching a blob from outside the
	// site now; nil for never. A request for such a blob waits until
	// the node has it, up to CommitWait.
	Pulling func(digest.Digest) bool
	// CommitWait bounds that wait: 2m.
	CommitWait time.Duration
	// Poll is how often the store is looked at during it: 200ms.
	Poll time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// DefaultServerConfig returns the defaults above.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{CommitWait: 2 * time.Minute, Poll: 200 * time.Millisecond}
}

// Validate reports the first invalid field.
func (c *ServerConfig) Validate() error {
	switch {
	case c.Identity.Certificate == nil || c.Identity.Roots == nil:
		return errors.New("imageshare: no identity")
	case c.Allowed == nil:
		return errors.New("imageshare: no Allowed")
	case c.Content == nil:
		return errors.New("imageshare: no content store")
	case c.CommitWait < 0 || c.Poll <= 0:
		return errors.New("imageshare: commit wait must not be negative, poll must be positive")
	}
	return nil
}

// Server serves the node's content to its site peers: GET and HEAD of
// /v2/<name>/blobs/<digest> and /v2/<name>/manifests/<digest>, by sha256
// digest only, and GET /v2/, over mutual TLS. It is read-only. Blobs of
// its Files are served with Range requests too.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
}

// NewServer returns a Server as cfg says; it starts nothing.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Timeouts of the Server's connections. A blob may be large and the LAN
// slow, so a response's write is not bounded; the peer's own timeout
// ends a stalled one.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 16 << 10
)

// Serve serves on ln, which it closes, until ctx ends; it returns after
// every connection has closed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		TLSConfig:         serverTLS(s.cfg.Identity, s.cfg.Allowed),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		_ = hs.Close()
	}()
	err := hs.ServeTLS(ln, "", "")
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// maxManifest bounds a manifest read to find its media type.
const maxManifest = 4 << 20

// ServeHTTP answers one request of the distribution API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		distError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "read-only")
		return
	}
	if r.URL.Path == "/v2/" || r.URL.Path == "/v2" {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		w.WriteHeader(http.StatusOK)
		return
	}
	kind, d, err := parsePath(r.URL.Path)
	if err != nil {
		distError(w, http.StatusNotFound, "NAME_UNKNOWN", err.Error())
		return
	}
	ctx := namespaces.WithNamespace(r.Context(), s.cfg.Namespace)
	info, file, err := s.info(ctx, kind, d, r.Method == http.MethodGet)
	if file != nil {
		defer file.Close()
		w.Header().Set("Docker-Content-Digest", d.String())
		w.Header().Set("Content-Type", "application/octet-stream")
		// HEAD, Range and If-Range as net/http does them for files.
		http.ServeContent(w, r, "", time.Time{}, file)
		return
	}
	if err != nil {
		if !errdefs.IsNotFound(err) {
			s.log.Warn("image share: read content", "digest", d, "err", err)
		}
		code := "BLOB_UNKNOWN"
		if kind == kindManifest {
			code = "MANIFEST_UNKNOWN"
		}
		distError(w, http.StatusNotFound, code, "not held")
		return
	}
	h := w.Header()
	h.Set("Docker-Content-Digest", d.String())
	h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	h.Set("Content-Type", "application/octet-stream")
	if kind == kindBlob && r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	ra, err := s.cfg.Content.ReaderAt(ctx, ocispec.Descriptor{Digest: d, Size: info.Size})
	if err != nil {
		distError(w, http.StatusNotFound, "BLOB_UNKNOWN", "not held")
		return
	}
	defer ra.Close()
	if kind == kindManifest {
		mt, err := mediaType(ra, info.Size)
		if err != nil {
			distError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "not a manifest")
			return
		}
		h.Set("Content-Type", mt)
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, io.NewSectionReader(ra, 0, info.Size)); err != nil {
		s.log.Debug("image share: send content", "digest", d, "err", err)
	}
}

// info returns the content d's record, or, for a blob its Content does
// not hold, the file of it its Files holds, which the caller closes;
// with wait, it waits for the node to commit it, up to CommitWait, while
// it is pulling it. A HEAD does not wait: it asks whether the node holds
// the content now. Not held is an error errdefs.IsNotFound.
func (s *Server) info(ctx context.Context, kind string, d digest.Digest, wait bool) (content.Info, io.ReadSeekCloser, error) {
	info, file, err := s.look(ctx, kind, d)
	if err == nil || !wait || !errdefs.IsNotFound(err) || s.cfg.Pulling == nil {
		return info, file, err
	}
	if !s.cfg.Pulling(d) {
		// Not pulling it, or committed since the look above: the pull
		// is Done only after the commit.
		return s.look(ctx, kind, d)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CommitWait)
	defer cancel()
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return content.Info{}, nil, fmt.Errorf("%w: still pulling", errdefs.ErrNotFound)
		case <-t.C:
		}
		info, file, err = s.look(ctx, kind, d)
		if err == nil || !errdefs.IsNotFound(err) {
			return info, file, err
		}
		if !s.cfg.Pulling(d) {
			// Given up, or committed since the look above.
			return s.look(ctx, kind, d)
		}
	}
}

// look looks for d once: in the Content, then, for a blob, in the Files.
func (s *Server) look(ctx context.Context, kind string, d digest.Digest) (content.Info, io.ReadSeekCloser, error) {
	info, err := s.cfg.Content.Info(ctx, d)
	if err == nil || !errdefs.IsNotFound(err) || kind != kindBlob || s.cfg.Files == nil {
		return info, nil, err
	}
	f, ferr := s.cfg.Files.OpenBlob(d)
	switch {
	case ferr == nil:
		return content.Info{}, f, nil
	case errors.Is(ferr, fs.ErrNotExist):
		return info, nil, err
	}
	return content.Info{}, nil, ferr
}

// mediaType returns the media type of the manifest in ra: its own
// mediaType field, or, for an OCI manifest or index without one, what
// its fields say it is.
func mediaType(ra io.ReaderAt, size int64) (string, error) {
	if size > maxManifest {
		return "", errors.New("too large for a manifest")
	}
	b := make([]byte, size)
	if _, err := ra.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && len(b) == int(size)) {
		return "", err
	}
	var m struct {
		MediaType string          `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
		Config    json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	switch {
	case m.MediaType != "":
		return m.MediaType, nil
	case m.Manifests != nil:
		return ocispec.MediaTypeImageIndex, nil
	case m.Config != nil:
		return ocispec.MediaTypeImageManifest, nil
	}
	return "", errors.New("no media type")
}

// distError writes the distribution API's error body.
func distError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
