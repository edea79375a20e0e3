package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestRaftLogGoesToSlog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := raftLogger(log, "warn")
	l.Info("dropped below the level")
	l.Warn("heartbeat timeout reached", "last-leader-id", "n2")
	out := buf.String()
	if strings.Contains(out, "dropped") {
		t.Errorf("record below the raft level was logged: %s", out)
	}
	for _, want := range []string{`"level":"WARN"`, `"msg":"heartbeat timeout reached"`, `"component":"raft"`, `"last-leader-id":"n2"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s: %s", want, out)
		}
	}
}
