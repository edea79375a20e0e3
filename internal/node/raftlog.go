package node

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger routes the raft library's log into slog, at debug level for its
// chatter and at warn and error for what an operator should see.
type raftLogger struct {
	log *slog.Logger
	min slog.Level // records below it are dropped
}

func (l raftLogger) out(level slog.Level, msg string) {
	if level >= l.min {
		l.log.Log(context.Background(), level, msg, "component", "raft")
	}
}

// ParseRaftLogLevel parses the level of the raft library's own log:
// "debug", "info", "warn", "error" or "off".
func ParseRaftLogLevel(s string) (slog.Level, error) {
	if s == "off" {
		return slog.LevelError + 100, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("raft log level %q: give debug, info, warn, error or off", s)
	}
	return l, nil
}

func (l raftLogger) Debug(v ...any)              { l.out(slog.LevelDebug, fmt.Sprint(v...)) }
func (l raftLogger) Debugf(f string, v ...any)   { l.out(slog.LevelDebug, fmt.Sprintf(f, v...)) }
func (l raftLogger) Info(v ...any)               { l.out(slog.LevelDebug, fmt.Sprint(v...)) }
func (l raftLogger) Infof(f string, v ...any)    { l.out(slog.LevelDebug, fmt.Sprintf(f, v...)) }
func (l raftLogger) Warning(v ...any)            { l.out(slog.LevelWarn, fmt.Sprint(v...)) }
func (l raftLogger) Warningf(f string, v ...any) { l.out(slog.LevelWarn, fmt.Sprintf(f, v...)) }
func (l raftLogger) Error(v ...any)              { l.out(slog.LevelError, fmt.Sprint(v...)) }
func (l raftLogger) Errorf(f string, v ...any)   { l.out(slog.LevelError, fmt.Sprintf(f, v...)) }
func (l raftLogger) Fatal(v ...any)              { l.Panic(v...) }
func (l raftLogger) Fatalf(f string, v ...any)   { l.Panicf(f, v...) }
func (l raftLogger) Panic(v ...any)              { s := fmt.Sprint(v...); l.out(slog.LevelError, s); panic(s) }
func (l raftLogger) Panicf(f string, v ...any) {
	s := fmt.Sprintf(f, v...)
	l.out(slog.LevelError, s)
	panic(s)
}
