// fence: this file is fence's addition to hashicorp/raft (see PATCHES.md).

package raft

import (
	"time"

	"github.com/hashicorp/go-metrics"
)

// leaderWriteQueue bounds the batches waiting for the leader's own write;
// a full queue holds the leader loop back as a slow synchronous write did.
// Every unwritten entry must stay in the LogCache: with MaxAppendEntries
// entries per batch at most, the cache needs MaxAppendEntries ×
// (leaderWriteQueue+2) slots (4096 is enough for the default 64 entries).
const leaderWriteQueue = 32

// leaderWriter writes a leader's new entries to its LogStore in the
// background, in log order, while the replicators already send them
// (Config.LeaderWritesInParallel). Each batch counts toward the commit
// only after it is durable here.
type leaderWriter struct {
	cache *LogCache
	in    chan leaderWrite
	done  chan struct{}
	err   error // the first failed write; read only after done is closed
}

type leaderWrite struct {
	logs []*Log
	last uint64
}

func (r *Raft) startLeaderWriter(cache *LogCache, c *commitment, stepDown chan struct{}) *leaderWriter {
	w := &leaderWriter{cache: cache, in: make(chan leaderWrite, leaderWriteQueue), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for b := range w.in {
			if w.err != nil {
				continue // never write past a gap
			}
			start := time.Now()
			if err := cache.StoreLogs(b.logs); err != nil {
				w.err = err
				r.logger.Error("failed to write logs; stepping down", "error", err)
				asyncNotifyCh(stepDown)
				continue
			}
			metrics.MeasureSince([]string{"raft", "leader", "writeLogs"}, start)
			c.match(r.localID, b.last)
		}
	}()
	return w
}

// stopLeaderWriter waits for the writes in flight. If one failed, the
// entries after the last one stored exist only in the cache: the cache is
// emptied and the last log index set back to what the store holds.
func (r *Raft) stopLeaderWriter(w *leaderWriter) {
	close(w.in)
	<-w.done
	if w.err == nil {
		return
	}
	w.cache.forget()
	last, err := r.logs.LastIndex()
	if err != nil {
		panic(err) // as raft does when its log cannot be read
	}
	var term uint64
	if last > 0 {
		var l Log
		if err := r.logs.GetLog(last, &l); err != nil {
			panic(err)
		}
		term = l.Term
	}
	r.setLastLog(last, term)
}
