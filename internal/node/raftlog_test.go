package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestRaftLogGoesToSlog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	level, err := ParseRaftLogLevel("warn")
	if err != nil {
		t.Fatal(err)
	}
	l := raftLogger{log, level}
	l.Infof("dropped below the level %d", 1)
	l.Warningf("%x is starting a new election at term %d", 7, 3)
	out := buf.String()
	if strings.Contains(out, "dropped") {
		t.Errorf("record below the raft level was logged: %s", out)
	}
	for _, want := range []string{`"level":"WARN"`, `"msg":"7 is starting a new election at term 3"`, `"component":"raft"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s: %s", want, out)
		}
	}
	off, _ := ParseRaftLogLevel("off")
	raftLogger{log, off}.Error("never")
	if strings.Contains(buf.String(), "never") {
		t.Error(`"off" logged an error`)
	}
	if _, err := ParseRaftLogLevel("loud"); err == nil {
		t.Error("a bad level was accepted")
	}
}
