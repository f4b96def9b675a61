package streams

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// PortForward handles a port-forward tunnel: the node dials the pod's
// port (for a pod on the host's network, 127.0.0.1 in the node's
// network namespace) and the tunnel carries the connection's bytes both
// ways, half-closes included. A failed dial is a refusal.
func (s *Server) PortForward(ctx context.Context, open *wire.TunnelOpen) (func(wire.TunnelStream), error) {
	port, err := strconv.ParseUint(open.Param("port"), 10, 16)
	if err != nil || port == 0 {
		return nil, refuse(wire.CodeBadRequest, "port=%q is not a port number", open.Param("port"))
	}
	pod, err := s.findPod(ctx, open)
	if err != nil {
		return nil, err
	}
	host := pod.IP
	if pod.Spec.Spec.HostNetwork {
		host = "127.0.0.1"
	}
	if host == "" {
		return nil, refuse(wire.CodeUnavailable, "pod %s has no IP yet", pod.Spec.Name)
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	conn, err := s.cfg.Dial(dctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
	if err != nil {
		return nil, refuse(wire.CodeUnavailable, "forward to port %d of pod %s: %v", port, pod.Spec.Name, err)
	}
	return func(st wire.TunnelStream) { splice(ctx, st, conn) }, nil
}

// splice copies both ways between st and conn, passing on each
// half-close, until both ways ended or one broke or ctx is done, then
// closes both.
func splice(ctx context.Context, st wire.TunnelStream, conn net.Conn) {
	stop := context.AfterFunc(ctx, func() { st.Close(); conn.Close() })
	defer stop()
	var once sync.Once
	closeBoth := func() { once.Do(func() { st.Close(); conn.Close() }) }
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := io.Copy(conn, st)
		if err != nil {
			closeBoth()
			return
		}
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			closeBoth()
		}
	})
	wg.Go(func() {
		_, err := io.Copy(st, conn)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			closeBoth()
			return
		}
		_ = st.CloseWrite()
	})
	wg.Wait()
	closeBoth()
}
