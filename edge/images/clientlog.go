package images

import (
	"context"
	"io"
	"log/slog"

	"github.com/containerd/log"
	"github.com/sirupsen/logrus"
)

// slogHook sends the containerd client's log entries, which it writes
// with logrus, to a slog.Logger: its info chatter (each registry host
// tried) at debug, warnings and errors as they are.
type slogHook struct{ l *slog.Logger }

func (h slogHook) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel, logrus.InfoLevel}
}

func (h slogHook) Fire(e *logrus.Entry) error {
	level := slog.LevelDebug
	switch {
	case e.Level <= logrus.ErrorLevel:
		level = slog.LevelError
	case e.Level == logrus.WarnLevel:
		level = slog.LevelWarn
	}
	attrs := make([]slog.Attr, 0, len(e.Data))
	for k, v := range e.Data {
		attrs = append(attrs, slog.Any(k, v))
	}
	h.l.LogAttrs(context.Background(), level, "containerd client: "+e.Message, attrs...)
	return nil
}

// newClientLog returns the logger the containerd client logs to under
// the Service's contexts.
func newClientLog(l *slog.Logger) *log.Entry {
	lr := logrus.New()
	lr.Out = io.Discard
	lr.Level = logrus.InfoLevel
	lr.AddHook(slogHook{l})
	return logrus.NewEntry(lr)
}

func withClientLog(ctx context.Context, e *log.Entry) context.Context {
	return log.WithLogger(ctx, e)
}
