package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
)

// WorkerEnv is the environment variable that turns a harness binary into a
// worker: it holds the worker's configuration as JSON.
const WorkerEnv = "FENCE_CHAOS_WORKER"

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	ID          string        // w1, w2, …
	Incarnation int           // +1 each time the harness restarts it
	Servers     []string      // every member's gRPC address
	PostgresURL string        // the database with Table
	Table       string        // id BIGINT PRIMARY KEY, value BIGINT, fence BIGINT
	Locks       int           // lock-0 … lock-(Locks-1); row id and kv key follow the lock
	TTL         time.Duration // lease TTL
	Fencing     bool          // false: the control run writes the row without the token check
	History     string        // file to append operations to
	Seed        uint64
}

// RunWorkerFromEnv runs the worker configured in WorkerEnv until SIGTERM.
func RunWorkerFromEnv() error {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &cfg); err != nil {
		return fmt.Errorf("%s: %w", WorkerEnv, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runWorker(ctx, cfg)
}

// worker loops: lock a random name, claim and read its row, hold it a
// while (where pauses land), write the row and the kv key under the token,
// release. Every call is recorded.
type worker struct {
	cfg    WorkerConfig
	rec    *recorder
	rng    *rand.Rand
	cl     *client.Client
	db     *sql.DB
	table  *fencing.Table
	client string // current client id; changes after an unknown outcome
	ids    int
	seq    int
}

func runWorker(stop context.Context, cfg WorkerConfig) error {
	rec, err := newRecorder(cfg.History)
	if err != nil {
		return err
	}
	defer rec.close()
	w := &worker{cfg: cfg, rec: rec, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Incarnation)))}
	w.newClient()
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w.cl, err = client.Dial(dctx, cfg.Servers, client.WithTTL(cfg.TTL), client.WithOwner(w.client)); err != nil {
		return err
	}
	defer w.cl.Close()
	if w.db, err = sql.Open("pgx", cfg.PostgresURL); err != nil {
		return err
	}
	defer w.db.Close()
	if w.table, err = fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: cfg.Table, Key: []string{"id"}}); err != nil {
		return err
	}
	for stop.Err() == nil {
		w.iteration()
	}
	return nil
}

func (w *worker) newClient() {
	w.ids++
	w.client = fmt.Sprintf("%s.%d.%d", w.cfg.ID, w.cfg.Incarnation, w.ids)
	w.seq = 0
}

// call records the start of an operation.
func (w *worker) call(kind, lock string, token uint64, value string) *Op {
	w.seq++
	o := &Op{Client: w.client, Seq: w.seq, Kind: kind, Lock: lock, Token: token, Value: value, Call: Mono()}
	w.rec.write(o)
	return o
}

// ret records its end. An unknown outcome moves the worker to a new
// client id: the open operation may still take effect.
func (w *worker) ret(o *Op, outcome string, err error) {
	o.Outcome = outcome
	if err != nil {
		o.Err = err.Error()
	}
	if outcome != Unknown {
		o.Return = Mono()
	}
	w.rec.write(o)
	if outcome == Unknown {
		w.newClient()
	}
}

// timed runs one call with its own deadline, counted from when the call
// starts: a pause before it does not use up its time (a pause during it does,
// as in any real process).
func (w *worker) timed(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*w.cfg.TTL)
	defer cancel()
	return f(ctx)
}

func (w *worker) iteration() {
	id := w.rng.IntN(w.cfg.Locks)
	name := "lock-" + strconv.Itoa(id)
	if w.rng.IntN(4) == 0 {
		w.status(name)
	}
	acq := w.call("acquire", name, 0, "")
	var l *client.Lease
	err := w.timed(func(ctx context.Context) (err error) { l, err = w.cl.Lock(ctx, name); return err })
	if err != nil {
		w.ret(acq, Unknown, err) // a grant may have happened (and been undone)
		time.Sleep(w.cfg.TTL / 10)
		return
	}
	acq.Token, acq.ValidUntil = l.Token(), monoAt(l.Deadline())
	w.ret(acq, OK, nil)
	tok := l.Token()
	if w.critical(l, id, name, tok) {
		rel := w.call("release", name, tok, "")
		switch err := w.timed(l.Release); {
		case err == nil:
			w.ret(rel, OK, nil)
		case errors.Is(err, client.ErrExpired):
			w.ret(rel, Fail, err)
		default:
			w.ret(rel, Unknown, err)
		}
	}
}

// critical is the work under the lock. It returns false if it gave up on
// the lease (then there is nothing to release).
func (w *worker) critical(l *client.Lease, id int, name string, tok uint64) bool {
	if w.cfg.Fencing {
		claim := w.call("claim", name, tok, "")
		if !w.dbResult(claim, w.timed(func(ctx context.Context) error { return w.table.Claim(ctx, w.db, tok, id) })) {
			return true
		}
	}
	read := w.call("read", name, 0, "")
	var value, fence int64
	if err := w.timed(func(ctx context.Context) error {
		return w.db.QueryRowContext(ctx, "SELECT value, fence FROM "+w.cfg.Table+" WHERE id = $1", id).Scan(&value, &fence)
	}); err != nil {
		w.ret(read, Unknown, err)
		return true
	}
	read.Value, read.Token = strconv.FormatInt(value, 10), uint64(fence)
	w.ret(read, OK, nil)

	if err := l.Err(); err != nil {
		return false // a careful holder checks its lease before the work...
	}
	valid := monoAt(l.Deadline())
	// ...but the work takes time, and a pause here outlives the lease: only
	// the token stops the write that follows.
	time.Sleep(time.Duration(w.rng.Int64N(int64(w.cfg.TTL / 2))))
	write := w.call("write", name, tok, strconv.FormatInt(value+1, 10))
	write.ValidUntil = valid
	if !w.dbResult(write, w.timed(func(ctx context.Context) error { return w.write(ctx, tok, id, value+1) })) {
		return true
	}

	get := w.call("kvget", name, 0, "")
	var v []byte
	var kvTok uint64
	switch err := w.timed(func(ctx context.Context) (err error) { v, kvTok, err = w.cl.Get(ctx, name); return err }); {
	case err == nil:
		get.Value, get.Token = string(v), kvTok
		w.ret(get, OK, nil)
	case status.Code(err) == codes.NotFound:
		w.ret(get, Fail, err)
	default:
		w.ret(get, Unknown, err)
	}
	put := w.call("kvput", name, tok, fmt.Sprintf("%s#%d", w.client, w.seq+1))
	put.ValidUntil = valid
	w.dbResult(put, w.timed(func(ctx context.Context) error { return w.cl.Put(ctx, name, []byte(put.Value), tok) }))
	return true
}

// write stores the row's new value under the token: through the fencing
// package, or, in the control run, with the same statement minus the check.
func (w *worker) write(ctx context.Context, tok uint64, id int, value int64) error {
	if w.cfg.Fencing {
		return w.table.Update(ctx, w.db, tok, id, map[string]any{"value": value})
	}
	_, err := w.db.ExecContext(ctx, "UPDATE "+w.cfg.Table+" SET value = $1, fence = $2 WHERE id = $3", value, int64(tok), id)
	return err
}

// dbResult records a fenced write's outcome and reports whether it went through.
func (w *worker) dbResult(o *Op, err error) bool {
	switch {
	case err == nil:
		w.ret(o, OK, nil)
		return true
	case errors.Is(err, fencing.ErrStale):
		var se *fencing.StaleError
		if errors.As(err, &se) {
			o.Highest = uint64(se.Highest)
		}
		w.ret(o, Stale, err)
	default:
		w.ret(o, Unknown, err)
	}
	return false
}

func (w *worker) status(name string) {
	o := w.call("status", name, 0, "")
	var info client.LockInfo
	if err := w.timed(func(ctx context.Context) (err error) { info, err = w.cl.Status(ctx, name); return err }); err != nil {
		w.ret(o, Unknown, err)
		return
	}
	if info.Held() {
		o.Token = info.Token
	}
	w.ret(o, OK, nil)
}
