package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
)

// jobProc is one `fence run` process of startJobs: its flags, and MODE
// for its job.
type jobProc struct {
	args []string
	mode string
}

// startJobs runs one `fence run NAME args… -- sh -c job` process per proc
// at once, each with LOG=log and MODE=its mode, and waits for all of them.
func startJobs(t *testing.T, n *node, name, log, job string, procs []jobProc) {
	t.Helper()
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			argv := append(append([]string{"run", name, "--ttl", "3s", "--wait", "60s"}, p.args...), "--", "sh", "-c", job)
			cmd := fenceCmd(t, n, argv...)
			cmd.Env = append(os.Environ(), "LOG="+log, "MODE="+p.mode)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("fence run %d %v: %v\n%s", i, p.args, err, out)
			}
		}()
	}
	wg.Wait()
}

// sweep calls at for every start and end in the jobs' log, in time order
// (an end before a start at the same instant), with the jobs running just
// after it.
func sweep(jobs []*jobRun, at func(running []*jobRun)) {
	type edge struct {
		ns    int64
		start bool
		job   *jobRun
	}
	var edges []edge
	for _, j := range jobs {
		edges = append(edges, edge{j.start, true, j}, edge{j.end, false, j})
	}
	sort.Slice(edges, func(a, b int) bool {
		if edges[a].ns != edges[b].ns {
			return edges[a].ns < edges[b].ns
		}
		return !edges[a].start && edges[b].start
	})
	running := map[*jobRun]bool{}
	for _, e := range edges {
		if e.start {
			running[e.job] = true
		} else {
			delete(running, e.job)
		}
		var now []*jobRun
		for j := range running {
			now = append(now, j)
		}
		at(now)
	}
}

// TestFenceRunPermitsNeverMoreThanN starts six `fence run --permits 3`
// processes at once; each job logs its start and end time, token and
// slot. Never more than three run at once, the ones running at once have
// different slots, every run has its own token, and more than one ran at
// once (it is a semaphore, not a mutex).
func TestFenceRunPermitsNeverMoreThanN(t *testing.T) {
	n := newNode(t, "--lock-delay", "0")
	n.start()
	log := filepath.Join(t.TempDir(), "jobs.log")
	job := `echo start $(date +%s%N) $FENCE_TOKEN $FENCE_SLOT >> "$LOG"; sleep 0.4; echo end $(date +%s%N) $FENCE_TOKEN $FENCE_SLOT >> "$LOG"`
	const permits, runs = 3, 6
	procs := make([]jobProc, runs)
	for i := range procs {
		procs[i] = jobProc{args: []string{"--permits", "3"}}
	}
	startJobs(t, n, "jobs/export", log, job, procs)
	jobs := readJobLog(t, log)
	if len(jobs) != runs {
		t.Fatalf("%d distinct tokens in %d runs", len(jobs), runs)
	}
	most := 0
	sweep(jobs, func(running []*jobRun) {
		most = max(most, len(running))
		slots := map[string]bool{}
		for _, j := range running {
			if slots[j.rest] || j.rest < "0" || j.rest > "2" {
				t.Errorf("slot %q held twice at once, or outside 0…2", j.rest)
			}
			slots[j.rest] = true
		}
	})
	if most > permits || most < 2 {
		t.Fatalf("at most %d jobs ran at once; want 2…%d", most, permits)
	}
	t.Logf("%d runs, at most %d at once", runs, most)
}

// TestFenceRunSharedNeverBesideAWriter starts four readers (`fence run
// --shared`) and two writers (`fence run`) of one name at once: a writer
// never runs beside anyone, and a writer's token is above every token of
// a job that started before it.
func TestFenceRunSharedNeverBesideAWriter(t *testing.T) {
	n := newNode(t, "--lock-delay", "0")
	n.start()
	log := filepath.Join(t.TempDir(), "jobs.log")
	job := `echo start $(date +%s%N) $FENCE_TOKEN $MODE >> "$LOG"; sleep 0.3; echo end $(date +%s%N) $FENCE_TOKEN $MODE >> "$LOG"`
	var procs []jobProc
	for i := 0; i < 6; i++ {
		if i == 1 || i == 4 {
			procs = append(procs, jobProc{mode: "writer"})
		} else {
			procs = append(procs, jobProc{args: []string{"--shared"}, mode: "reader"})
		}
	}
	startJobs(t, n, "catalog", log, job, procs)
	jobs := readJobLog(t, log)
	if len(jobs) != 6 {
		t.Fatalf("%d distinct tokens in 6 runs", len(jobs))
	}
	sweep(jobs, func(running []*jobRun) {
		for _, j := range running {
			if j.rest == "writer" && len(running) > 1 {
				t.Errorf("writer with token %d ran beside %d others", j.token, len(running)-1)
			}
		}
	})
	for i, j := range jobs {
		if j.rest != "writer" {
			continue
		}
		for _, before := range jobs[:i] {
			if before.token >= j.token {
				t.Errorf("writer's token %d is not above the token %d of a job that started before it", j.token, before.token)
			}
		}
	}
	t.Logf("in start order: %v", func() (s []string) {
		for _, j := range jobs {
			s = append(s, fmt.Sprintf("%s %d", j.rest, j.token))
		}
		return
	}())
}
