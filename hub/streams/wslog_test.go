package streams

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// The WebSocket connection's report of a session this server closed is
// debug, not an error; its other errors stay errors.
func TestWSLoggerQuietsClosedReceive(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var out bytes.Buffer
		s := &Server{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level}))}
		r := s.withWSLogger(httptest.NewRequest("GET", "/", nil))
		logger := klog.FromContext(r.Context())
		logger.Error(fmt.Errorf("read tcp 127.0.0.1:1->127.0.0.1:2: %w", net.ErrClosed), wsReceiveEnded)
		logger.Error(errors.New("connection reset by peer"), wsReceiveEnded)
		logger.Error(nil, "Single channel byte should follow stream close signal")
		got := out.String()
		if n := strings.Count(got, "level=ERROR"); n != 2 {
			t.Errorf("at %v, %d errors logged, want the reset and the bad signal:\n%s", level, n, got)
		}
		if strings.Contains(got, "level=ERROR") && strings.Contains(got, "use of closed network connection") && strings.Contains(got, "level=ERROR msg=\""+wsReceiveEnded+"\" err=\"read tcp") {
			t.Errorf("at %v, the closed connection was logged as an error:\n%s", level, got)
		}
		if debug := strings.Contains(got, "level=DEBUG"); debug != (level == slog.LevelDebug) {
			t.Errorf("at %v, the closed connection's debug line shown: %v:\n%s", level, debug, got)
		}
	}
}
