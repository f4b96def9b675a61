package streams

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// wsReceiveEnded is what k8s.io/streaming's WebSocket connection logs, as
// an error, when its reader finds the connection closed: at the end of
// every session this server ends itself, once the exit status is sent.
const wsReceiveEnded = "Error on socket receive"

// withWSLogger returns r with a logger for the WebSocket connection's own
// logs in its context (it takes it from there): the server's, with the
// end of a session this server closed demoted to debug, where kubelet
// reports it as an error each time.
func (s *Server) withWSLogger(r *http.Request) *http.Request {
	return r.WithContext(klog.NewContext(r.Context(), logr.FromSlogHandler(closedQuiet{s.log.Handler()})))
}

// closedQuiet demotes wsReceiveEnded for a closed connection to debug.
type closedQuiet struct{ slog.Handler }

func (h closedQuiet) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelError && rec.Message == wsReceiveEnded && closedConn(rec) {
		rec.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, rec.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, rec)
}

func (h closedQuiet) WithAttrs(as []slog.Attr) slog.Handler {
	return closedQuiet{h.Handler.WithAttrs(as)}
}

func (h closedQuiet) WithGroup(name string) slog.Handler {
	return closedQuiet{h.Handler.WithGroup(name)}
}

// closedConn reports whether rec's error is the use of a closed
// connection.
func closedConn(rec slog.Record) bool {
	closed := false
	rec.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, net.ErrClosed) {
			closed = true
			return false
		}
		return true
	})
	return closed
}
