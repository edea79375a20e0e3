package server

import (
	"context"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// raftLogger routes hashicorp/raft's hclog output into slog, so the server
// writes one structured log. Records below level are dropped.
func raftLogger(log *slog.Logger, level string) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "raft", Level: hclog.Off, Output: io.Discard})
	l.RegisterSink(slogSink{log: log.With("component", "raft"), level: hclog.LevelFromString(level)})
	return l
}

type slogSink struct {
	log   *slog.Logger
	level hclog.Level
}

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < s.level || level == hclog.Off {
		return
	}
	var l slog.Level
	switch {
	case level >= hclog.Error:
		l = slog.LevelError
	case level == hclog.Warn:
		l = slog.LevelWarn
	case level == hclog.Info:
		l = slog.LevelInfo
	default:
		l = slog.LevelDebug
	}
	s.log.Log(context.Background(), l, msg, args...)
}
