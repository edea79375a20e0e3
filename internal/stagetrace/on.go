//go:build fence_stagetrace

package stagetrace

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

var (
	mu  sync.Mutex
	out *bufio.Writer // nil until the first Mark; flushed every 100 ms
)

// Mark records that stage happened now for the entry at index.
func Mark(stage string, index uint64) {
	now := time.Now().UnixNano()
	mu.Lock()
	defer mu.Unlock()
	if out == nil {
		f, err := os.Create(filepath.Join(os.Getenv("FENCE_STAGETRACE_DIR"), fmt.Sprintf("stages-%d.txt", os.Getpid())))
		if err != nil {
			panic(fmt.Sprintf("stagetrace: %v", err)) // a measuring build only
		}
		out = bufio.NewWriterSize(f, 1<<20)
		go func() {
			for range time.Tick(100 * time.Millisecond) {
				mu.Lock()
				_ = out.Flush()
				mu.Unlock()
			}
		}()
	}
	fmt.Fprintf(out, "%d %s %d\n", now, stage, index)
}

// Msg marks a MsgApp (at its last entry's index) or a MsgAppResp (at the
// index it answers); other messages are not stages.
func Msg(stage string, m *raftpb.Message) {
	switch {
	case m.GetType() == raftpb.MsgApp && len(m.GetEntries()) > 0:
		Mark(stage+"-app", m.GetEntries()[len(m.GetEntries())-1].GetIndex())
	case m.GetType() == raftpb.MsgAppResp:
		Mark(stage+"-resp", m.GetIndex())
	}
}

// Msgs marks each of ms as Msg does.
func Msgs(stage string, ms []*raftpb.Message) {
	for _, m := range ms {
		Msg(stage, m)
	}
}

// Writes marks each log write of ms that holds entries, at its last one.
func Writes(stage string, ms []*raftpb.Message) {
	for _, m := range ms {
		if ents := m.GetEntries(); len(ents) > 0 {
			Mark(stage, ents[len(ents)-1].GetIndex())
		}
	}
}
