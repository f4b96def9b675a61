package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/content"

	"github.com/outpost-mesh/outpost/edge/imageshare"
	"github.com/outpost-mesh/outpost/edge/mesh"
)

// ImageShareDir, under Config.DataDir, holds the blobs a node fetches
// from its site peers until containerd has read them.
const ImageShareDir = "imageshare"

// imageShare is the node's part in sharing images with its site
// (edge/imageshare): the Fetcher its pulls use, and the content store
// its Server serves.
type imageShare struct {
	fetcher   *imageshare.Fetcher
	content   content.Store
	namespace string
}

// buildImageShare returns the image sharing of a node of a site mesh, on
// the content store cs of containerd namespace ns; nil for a node in no
// mesh.
func (a *Agent) buildImageShare(cs content.Store, ns string) (*imageShare, error) {
	if a.cfg.Mesh == nil {
		return nil, nil
	}
	dir := filepath.Join(a.cfg.DataDir, ImageShareDir)
	// What a crash left there is of no use.
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	fc := imageshare.DefaultFetcherConfig()
	fc.Node, fc.Identity, fc.Peers, fc.TempDir = a.cfg.NodeName, a.shareIdentity(), a.sitePeers, dir
	fc.Announce = func(pulling [][32]byte) error {
		return a.sayMeta(func(m *mesh.Meta) { m.Pulling = pulling })
	}
	fc.Logger, fc.Now = a.log.With("component", "imageshare"), a.now
	f, err := imageshare.NewFetcher(fc)
	if err != nil {
		return nil, err
	}
	return &imageShare{fetcher: f, content: cs, namespace: ns}, nil
}

// shareIdentity is the node's identity as image sharing uses it; a.id is
// read at each handshake, as Run sets it after the runtime starts.
func (a *Agent) shareIdentity() imageshare.Identity {
	return imageshare.Identity{
		Certificate: func() (*tls.Certificate, error) {
			if a.id == nil {
				return nil, errors.New("node has not joined")
			}
			return a.id.certificate()
		},
		Roots: func() *x509.CertPool {
			if a.id == nil {
				return nil
			}
			return a.id.roots()
		},
	}
}

// sitePeers returns the site peers the node holds alive; none while the
// mesh is not up.
func (a *Agent) sitePeers() []mesh.Peer {
	s := a.site.Load()
	if s == nil {
		return nil
	}
	return s.Peers()
}

// sitePeer reports whether node is a site peer the node holds alive.
func (a *Agent) sitePeer(node string) bool {
	for _, p := range a.sitePeers() {
		if p.Name == node {
			return true
		}
	}
	return false
}

// runImageShare serves the node's images to its site peers until ctx
// ends, on the mesh's address at the mesh's port + 2 (a free port when
// the mesh's is 0), and says the port in the node's mesh.Meta.
func (a *Agent) runImageShare(ctx context.Context) {
	sh := a.share
	defer sh.fetcher.Close()
	addr, ok := a.meshAddr(ctx)
	if !ok {
		return
	}
	var port uint16
	if addr.Port() != 0 {
		port = addr.Port() + 2
	}
	sc := imageshare.DefaultServerConfig()
	sc.Identity, sc.Allowed, sc.Content, sc.Namespace = a.shareIdentity(), a.sitePeer, sh.content, sh.namespace
	sc.Pulling, sc.Logger = sh.fetcher.Pulling, a.log.With("component", "imageshare")
	sc.Files = a.firmwareFiles() // the node's over-the-air artifacts
	srv, err := imageshare.NewServer(sc)
	if err != nil {
		a.log.Warn("image share not started", "err", err)
		return
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr.Addr(), port).String())
	if err != nil {
		a.log.Warn("image share not started: the site's peers pull from their registries", "err", err)
		return
	}
	bound := uint16(ln.Addr().(*net.TCPAddr).Port)
	if err := a.sayMeta(func(m *mesh.Meta) { m.ImagePort = bound }); err != nil {
		a.log.Warn("image share port not said", "err", err)
	}
	a.log.Info("serving images to the site's peers", "addr", ln.Addr().String())
	if err := srv.Serve(ctx, ln); err != nil {
		a.log.Warn("image share stopped", "err", err)
	}
}
