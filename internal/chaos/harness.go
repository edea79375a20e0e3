// Package chaos is fence's fault-injection harness: real server processes
// in network namespaces, real worker processes using the public client and
// the fencing package against PostgreSQL and MariaDB (in REPEATABLE READ
// transactions half the time), reaching the servers through a proxy that
// replays their requests, a seeded schedule of pauses, kills, partitions,
// clock shifts and replays, and checks of every recorded history
// (porcupine models of the lock service and of each fenced resource, the
// servers' audit trails, and the workers' validity windows).
//
// Entry points: `go run ./test/chaos` (or `make chaos`) for long runs, and
// the short run in test/chaos's tests.
package chaos

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fencehq/fence/client"
)

// Config configures a run.
type Config struct {
	Duration time.Duration // how long faults are injected
	Seed     uint64        // fixes the fault schedule and the workers' choices
	Servers  int           // 3 (a cluster) or 1 (the single-node mode)
	Workers  int
	Locks    int
	TTL      time.Duration // the workers' lease TTL
	// Fencing false is the control run: workers write the row without the
	// token check, and the checks must find lost updates.
	Fencing bool
	// LocksOnly keeps the workers on the locked rows (no elections,
	// semaphores or read-write locks): for the control run and the
	// planted-bug runs, whose evidence (lost updates, overlapping
	// windows) comes from the rows, so every iteration should be one.
	LocksOnly bool
	Faults    []string // default AllFaults
	// Transports are the workers' transports, worker i taking
	// Transports[i%len] (default Transports: both).
	Transports []string
	// FenceBinary is the fence executable the servers run.
	FenceBinary string
	// WorkerCommand starts a worker: the harness adds WorkerEnv to its
	// environment (see RunWorkerFromEnv).
	WorkerCommand []string
	PostgresURL   string
	// MySQLURL is a MariaDB (or MySQL) database for the second store; ""
	// leaves it out.
	MySQLURL string
	// Stores limits which stores workers write (default: every one with a
	// URL; for the control run, MariaDB alone if it has a URL: there,
	// without the token check, a stale write loses an update in a
	// transaction too, while PostgreSQL's REPEATABLE READ refuses a
	// transaction's stale write by itself, and the fewer rows the more
	// often a stale write lands on the row the next holder wrote).
	Stores []string
	// OutDir receives histories, logs, audit files and, on a violation, the
	// evidence. It must exist.
	OutDir string
	Log    io.Writer // progress lines; nil discards them
}

func (c *Config) defaults() error {
	if c.Servers == 0 {
		c.Servers = 3
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Locks == 0 {
		c.Locks = 3
	}
	if c.TTL == 0 {
		c.TTL = 1500 * time.Millisecond
	}
	if c.Faults == nil {
		c.Faults = AllFaults
	}
	if c.Transports == nil {
		c.Transports = Transports
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Stores == nil && !c.Fencing && c.MySQLURL != "" {
		c.Stores = []string{StoreMySQL}
	}
	switch {
	case c.Servers != 1 && c.Servers != 3 && c.Servers != 5:
		return fmt.Errorf("chaos: %d servers: use 1, 3 or 5", c.Servers)
	case c.Duration <= 0:
		return fmt.Errorf("chaos: duration %v must be positive", c.Duration)
	case c.TTL < 500*time.Millisecond:
		return fmt.Errorf("chaos: TTL %v below the servers' minimum 500ms", c.TTL)
	case c.FenceBinary == "" || len(c.WorkerCommand) == 0 || c.PostgresURL == "" || c.OutDir == "":
		return fmt.Errorf("chaos: FenceBinary, WorkerCommand, PostgresURL and OutDir are required")
	}
	for _, f := range c.Faults {
		if !contains(AllFaults, f) {
			return fmt.Errorf("chaos: unknown fault %q (known: %v)", f, AllFaults)
		}
	}
	if len(c.Transports) == 0 {
		return fmt.Errorf("chaos: no transport: give one or more of %v", Transports)
	}
	for _, t := range c.Transports {
		if !contains(Transports, t) {
			return fmt.Errorf("chaos: unknown transport %q (known: %v)", t, Transports)
		}
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

type workerProc struct {
	cfg  WorkerConfig
	p    *proc
	lock sync.Mutex // held while a fault acts on this worker
}

type harness struct {
	cfg     Config
	cl      *cluster
	dbs     map[string]*sql.DB // by store
	table   string
	workers []*workerProc
	proxy   *proxy
	certs   *certs // the run's TLS files
}

// Run performs one chaos run and checks it. An error means the run could
// not be carried out; violations are in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "chaos: "+format+"\n", args...) }
	logf("seed %d: %d servers, %d workers (transports %v), %d locks, TTL %v, fencing %v, %v of faults %v",
		cfg.Seed, cfg.Servers, cfg.Workers, cfg.Transports, cfg.Locks, cfg.TTL, cfg.Fencing, cfg.Duration, cfg.Faults)

	if err := h.createTable(ctx); err != nil {
		return nil, err
	}
	defer h.dropTable()
	var err error
	if h.certs, err = newCerts(filepath.Join(cfg.OutDir, "certs")); err != nil {
		return nil, err
	}
	creds, err := h.certs.clientCreds()
	if err != nil {
		return nil, err
	}
	proxyCreds, err := h.certs.proxyCreds()
	if err != nil {
		return nil, err
	}
	if h.cl, err = newCluster(cfg.Servers, cfg.FenceBinary, cfg.OutDir, h.certs); err != nil {
		return nil, err
	}
	defer h.cl.close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = h.cl.waitLeader(wctx)
	cancel()
	if err != nil {
		return nil, err
	}
	faultLog, err := os.Create(filepath.Join(cfg.OutDir, "faults.log"))
	if err != nil {
		return nil, err
	}
	defer faultLog.Close()
	f := &faulter{h: h, log: faultLog, enabled: map[string]bool{}, counts: FaultCounts{WorkerPauses: map[string]int{}}}
	for _, k := range cfg.Faults {
		f.enabled[k] = true
	}
	rp, err := newReplayer(h.cl.addrs(), creds, cfg.Seed, cfg.TTL, f.note)
	if err != nil {
		return nil, err
	}
	defer rp.close()
	if h.proxy, err = newProxy(h.cl.addrs(), rp.in, creds, proxyCreds); err != nil {
		return nil, err
	}
	defer h.proxy.close()
	rctx, rstop := context.WithCancel(ctx)
	defer rstop()
	rdone := make(chan struct{})
	go func() { defer close(rdone); rp.run(rctx, f.enabled[FaultReplay]) }()
	for i := range cfg.Workers {
		w := &workerProc{cfg: WorkerConfig{ID: "w" + strconv.Itoa(i+1), Servers: h.proxy.addrs, TLS: h.certs.client, TokenPub: h.certs.tokenPub(), PostgresURL: cfg.PostgresURL,
			MySQLURL: cfg.MySQLURL, Stores: cfg.Stores, TTLs: TTLModes[i%len(TTLModes)],
			Transport: cfg.Transports[i%len(cfg.Transports)],
			Table:     h.table, Locks: cfg.Locks, TTL: cfg.TTL, Fencing: cfg.Fencing, LocksOnly: cfg.LocksOnly,
			History: filepath.Join(cfg.OutDir, fmt.Sprintf("w%d.history", i+1)), Seed: cfg.Seed*1000 + uint64(i)}}
		if err := h.startWorker(w, 0); err != nil {
			return nil, err
		}
		h.workers = append(h.workers, w)
	}
	start := Mono()
	logf("cluster up, workers running (through the proxy); injecting faults for %v", cfg.Duration)

	fctx, stop := context.WithTimeout(ctx, cfg.Duration)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f.workerLoop(fctx, rand.New(rand.NewPCG(cfg.Seed, 1)), &wg) }()
	go func() { defer wg.Done(); f.serverLoop(fctx, rand.New(rand.NewPCG(cfg.Seed, 2))) }()
	wg.Wait()
	stop()
	rstop()
	<-rdone
	rp.wait()

	logf("faults stopped; healing, restarting what is down, stopping workers")
	if err := h.heal(ctx); err != nil {
		return nil, err
	}
	var sw sync.WaitGroup // in parallel: a worker may finish a long Lock first
	for _, w := range h.workers {
		sw.Add(1)
		go func() { defer sw.Done(); w.p.stop(8*cfg.TTL + 10*time.Second) }()
	}
	sw.Wait()
	final, err := h.finalOps(ctx)
	if err != nil {
		return nil, err
	}
	h.cl.stop()
	end := Mono()

	ops, err := loadHistories(cfg.OutDir)
	if err != nil {
		return nil, err
	}
	ops = append(ops, final...)
	audits, err := loadAudits(h.cl)
	if err != nil {
		return nil, err
	}
	replays, acted := rp.result()
	ops = append(ops, rp.proclaims()...)
	byCall(ops)
	r := check(ops, audits, h.proxy.leaseTTLs(), cfg.OutDir)
	r.add(acted...)
	r.Replays = replays
	r.Seed, r.Duration, r.Faults, r.Elapsed = cfg.Seed, cfg.Duration, f.counts, time.Duration(end-start)
	r.Fencing = cfg.Fencing
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.OutDir, "report.json"), b, 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

// startWorker (re)starts a worker process as its next incarnation.
func (h *harness) startWorker(w *workerProc, shift time.Duration) error {
	w.cfg.Incarnation++
	env, err := json.Marshal(w.cfg)
	if err != nil {
		return err
	}
	p, err := startProc(w.cfg.ID, shifted(shift, h.cfg.WorkerCommand), []string{WorkerEnv + "=" + string(env), "GOMAXPROCS=1"},
		filepath.Join(h.cfg.OutDir, w.cfg.ID+".log"))
	if err != nil {
		return err
	}
	w.p = p
	return nil
}

// heal waits for every fault to be undone (the loops undo their own on
// exit), restarts dead servers and workers' pauses, and waits for a leader.
func (h *harness) heal(ctx context.Context) error {
	for _, n := range h.cl.nodes {
		if p := n.proc(); p == nil || !p.alive() {
			if err := n.start(0); err != nil {
				return err
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := h.cl.waitLeader(wctx)
	return err
}

// createTable creates the run's table, one row per lock, in each store.
func (h *harness) createTable(ctx context.Context) error {
	b := make([]byte, 4)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	h.table = "chaos_" + hex.EncodeToString(b)
	h.dbs = map[string]*sql.DB{}
	for _, s := range []struct{ name, driver, url, ph string }{
		{StorePostgres, "pgx", h.cfg.PostgresURL, "$1"}, {StoreMySQL, "mysql", h.cfg.MySQLURL, "?"}} {
		if s.url == "" {
			continue
		}
		db, err := sql.Open(s.driver, s.url)
		if err != nil {
			return err
		}
		h.dbs[s.name] = db
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+h.table+" (id BIGINT PRIMARY KEY, value BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)"); err != nil {
			return fmt.Errorf("chaos: create table in %s: %w", s.name, err)
		}
		for i := range h.cfg.Locks {
			if _, err := db.ExecContext(ctx, "INSERT INTO "+h.table+" (id, value) VALUES ("+s.ph+", 0)", i); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h *harness) dropTable() {
	for _, db := range h.dbs {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + h.table)
		db.Close()
	}
}

// finalOps reads every lock, row and key once the faults are over, and
// takes each lock once (a lock nobody can take is a violation), recorded
// like a worker's operations under the client "final".
func (h *harness) finalOps(ctx context.Context) ([]*Op, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := client.Dial(dctx, h.cl.addrs(), client.WithTLSFiles(h.certs.client.CA, h.certs.client.Cert, h.certs.client.Key), client.WithTTL(5*time.Second), client.WithOwner("chaos-final"))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var ops []*Op
	seq := 0
	rec := func(kind, lock string, call int64, token uint64, value, outcome string, err error) {
		seq++
		o := &Op{Client: "final", Seq: seq, Kind: kind, Lock: lock, Token: token, Value: value, Call: call, Return: Mono(), Outcome: outcome}
		if err != nil {
			o.Err = err.Error()
		}
		ops = append(ops, o)
	}
	for i := range h.cfg.Locks {
		name := "lock-" + strconv.Itoa(i)
		for _, st := range []string{StorePostgres, StoreMySQL} {
			db := h.dbs[st]
			if db == nil {
				continue
			}
			ph := map[string]string{StorePostgres: "$1", StoreMySQL: "?"}[st]
			call := Mono()
			var value, fence int64
			if err := db.QueryRowContext(ctx, "SELECT value, fence FROM "+h.table+" WHERE id = "+ph, i).Scan(&value, &fence); err != nil {
				return nil, err
			}
			rec("read", name, call, uint64(fence), strconv.FormatInt(value, 10), OK, nil)
			ops[len(ops)-1].Store = st
		}

		call := Mono()
		v, tok, err := cl.Get(dctx, name)
		if err != nil {
			rec("kvget", name, call, 0, "", Fail, err)
		} else {
			rec("kvget", name, call, tok, string(v), OK, nil)
		}

		call = Mono()
		lctx, lcancel := context.WithTimeout(ctx, 4*h.cfg.TTL+10*time.Second)
		l, err := cl.Lock(lctx, name)
		lcancel()
		if err != nil {
			rec("acquire", name, call, 0, "", Fail, err)
			continue
		}
		rec("acquire", name, call, l.Token(), "", OK, nil)
		call = Mono()
		err = l.Release(dctx)
		rec("release", name, call, l.Token(), "", map[bool]string{true: OK, false: Unknown}[err == nil], err)
	}
	return ops, nil
}
