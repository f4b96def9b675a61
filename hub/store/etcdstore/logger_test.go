package etcdstore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestClientLogsGoToSlog(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	zl := zapToSlog(lg).Named("etcd-client").With(zap.String("endpoint", "127.0.0.1:2379"))
	zl.Info("dropped: below the handler's level")
	zl.Warn("retrying", zap.Int("attempt", 2), zap.Error(errors.New("unavailable")))
	got := buf.String()
	for _, want := range []string{"level=WARN", `msg=retrying`, "logger=etcd-client", "endpoint=127.0.0.1:2379", "attempt=2", "error=unavailable"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "dropped") || strings.Count(got, "\n") != 1 {
		t.Errorf("log %q: want exactly the warning", got)
	}
	zapToSlog(nil).Error("discarded") // must not panic
}
