package etcdstore

import (
	"context"
	"log/slog"
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog returns a zap logger, as the etcd client wants, that writes to
// lg; nil discards everything.
func zapToSlog(lg *slog.Logger) *zap.Logger {
	if lg == nil {
		return zap.NewNop()
	}
	return zap.New(slogCore{h: lg.Handler()})
}

// slogCore is a zapcore.Core handing entries to a slog.Handler.
type slogCore struct {
	h slog.Handler
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{h: c.h.WithAttrs(attrs(fields))}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// attrs renders zap fields as slog attributes, sorted by key.
func attrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]slog.Attr, len(keys))
	for i, k := range keys {
		out[i] = slog.Any(k, enc.Fields[k])
	}
	return out
}
