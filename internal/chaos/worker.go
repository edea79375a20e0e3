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
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver (MariaDB)
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/pki"
)

// WorkerEnv is the environment variable that turns a harness binary into a
// worker: it holds the worker's configuration as JSON.
const WorkerEnv = "FENCE_CHAOS_WORKER"

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	ID          string    // w1, w2, …
	Incarnation int       // +1 each time the harness restarts it
	Servers     []string  // every member's gRPC address
	TLS         pki.Files // the client certificate
	// TokenPub is the cluster's token public key: with Fencing, the rows
	// take only signed tokens of their lock (fencing.Table.UpdateSigned).
	TokenPub    string
	PostgresURL string        // the database with Table
	MySQLURL    string        // the MariaDB database with Table too ("": PostgreSQL only)
	Stores      []string      // the stores to write (default all)
	Table       string        // id BIGINT PRIMARY KEY, value BIGINT, fence BIGINT
	Locks       int           // lock-0 … lock-(Locks-1); row id and kv key follow the lock
	TTL         time.Duration // the run's lease TTL
	// TTLs is how this worker times its leases: TTLSession, TTLShortLocks
	// or TTLLongLocks.
	TTLs string
	// Transport is how this worker's client talks to the servers:
	// TransportSession or TransportUnary.
	Transport string
	Fencing   bool // false: the control run writes the row without the token check
	// LocksOnly: no elections, semaphores or read-write locks (see Config).
	LocksOnly bool
	History   string // file to append operations to
	Seed      uint64
}

// How a worker times its leases: the client's margin must follow each
// lease's own TTL, not the one the client was dialled with.
const (
	TTLSession    = "session"     // Dial WithTTL(TTL); Lock without a TTL
	TTLShortLocks = "short-locks" // Dial WithTTL(30s); Lock WithTTL(TTL or 2×TTL)
	TTLLongLocks  = "long-locks"  // Dial WithTTL(TTL); Lock WithTTL(4×TTL) half the time
)

// TTLModes lists them; worker i uses TTLModes[i%3].
var TTLModes = []string{TTLSession, TTLShortLocks, TTLLongLocks}

// How a worker's client talks to the servers. The two paths move a
// session's renewals differently: on a Session stream they follow the
// session's calls to another member; on a KeepAlive stream (the unary
// path, taken with a server older than the Session rpc) they stay with the
// member that answers them.
const (
	TransportSession = "session" // the default: calls and renewals on one Session stream
	TransportUnary   = "unary"   // the servers refuse the Session rpc, as an older fence does
)

// Transports lists them; by default worker i uses Transports[i%2].
var Transports = []string{TransportSession, TransportUnary}

// olderServer is a dial option under which every server refuses the
// Session rpc as a fence older than it does (UNIMPLEMENTED), so the client
// takes its unary path: unary calls and a KeepAlive stream.
func olderServer() grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == api.FenceService_Session_FullMethodName {
			return nil, status.Error(codes.Unimplemented, "unknown method Session (the chaos worker's unary transport)")
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
}

// The stores a worker writes, each holding one row per lock.
const (
	StorePostgres = "postgres"
	StoreMySQL    = "mysql" // MariaDB
)

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
	stores map[string]*store
	names  []string // the stores' names, sorted
	client string   // current client id; changes after an unknown outcome
	ids    int
	seq    int

	// mu guards the records (call, ret): the client's observer writes some
	// from its own goroutine (leaseLost). acquiring is the acquire in
	// flight, if any.
	mu        sync.Mutex
	acquiring *Op
}

// leaseLost splits an acquire in flight whose lease ended while it waited
// (the client's Observer.LeaseLost): the client goes on with a new lease
// and a new call, but the old lease's call may have been granted meanwhile
// — and that grant ended with the lease — without anyone learning its
// token (the answer was lost while the worker was paused, say). That part
// is an operation of unknown outcome, the rest a second acquire over the
// same time (both began with the worker's call); recorded as one acquire,
// the lost grant would be one no operation explains.
func (w *worker) leaseLost(error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.acquiring
	if old == nil {
		return
	}
	w.retLocked(old, Unknown, errors.New("its lease ended while it waited; the client goes on with a new lease and call"))
	// The rest counts from the same call: when this callback runs, the
	// client may already have sent the new call, even had it granted.
	w.acquiring = w.callLocked("acquire", old.Lock, 0, "", func(o *Op) { o.TTL, o.Call = old.TTL, old.Call })
}

// lostObserver passes Observer.LeaseLost to the worker.
type lostObserver struct{ w *worker }

func (o lostObserver) RenewalSent(bool)                {}
func (o lostObserver) LeaseLost(err error)             { o.w.leaseLost(err) }
func (o lostObserver) AcquireWait(time.Duration, bool) {}

// store is one database the worker writes rows of.
type store struct {
	name  string
	db    *sql.DB
	table *fencing.Table
	ph    func(n int) string // placeholder
}

// dialTTL is the TTL the worker's client is dialled with.
func (c WorkerConfig) dialTTL() time.Duration {
	if c.TTLs == TTLShortLocks {
		return 30 * time.Second
	}
	return c.TTL
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
	opts := []client.Option{client.WithTLSFiles(cfg.TLS.CA, cfg.TLS.Cert, cfg.TLS.Key), client.WithTTL(cfg.dialTTL()), client.WithOwner(w.client),
		client.WithObserver(lostObserver{w})}
	switch cfg.Transport {
	case TransportSession, "":
	case TransportUnary:
		opts = append(opts, client.WithDialOptions(olderServer()))
	default:
		return fmt.Errorf("transport %q: use %s or %s", cfg.Transport, TransportSession, TransportUnary)
	}
	if w.cl, err = client.Dial(dctx, cfg.Servers, opts...); err != nil {
		return err
	}
	defer w.cl.Close()
	w.stores = map[string]*store{}
	add := func(name, driver, url string, d *fencing.Dialect, ph func(int) string) error {
		db, err := sql.Open(driver, url)
		if err != nil {
			return err
		}
		tc := fencing.TableConfig{Dialect: d, Name: cfg.Table, Key: []string{"id"}}
		if cfg.TokenPub != "" {
			if tc.Verifier, err = fencing.LoadVerifier(cfg.TokenPub); err != nil {
				db.Close()
				return err
			}
			tc.LockName = func(k []string) string { return "lock-" + k[0] }
		}
		t, err := fencing.NewTable(tc)
		if err != nil {
			db.Close()
			return err
		}
		w.stores[name] = &store{name: name, db: db, table: t, ph: ph}
		w.names = append(w.names, name)
		return nil
	}
	if err := add(StorePostgres, "pgx", cfg.PostgresURL, fencing.Postgres, func(n int) string { return "$" + strconv.Itoa(n) }); err != nil {
		return err
	}
	if cfg.MySQLURL != "" {
		if err := add(StoreMySQL, "mysql", cfg.MySQLURL, fencing.MySQL, func(int) string { return "?" }); err != nil {
			return err
		}
	}
	defer func() {
		for _, s := range w.stores {
			s.db.Close()
		}
	}()
	if len(cfg.Stores) > 0 {
		w.names = nil
		for _, name := range cfg.Stores {
			if w.stores[name] == nil {
				return fmt.Errorf("store %q: not configured", name)
			}
			w.names = append(w.names, name)
		}
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

// call records the start of an operation. Whatever the checks need of an
// operation that never returns (a worker killed mid-call leaves it open)
// must be set by set before the record is written: its store, above all,
// or an open write that committed drops out of its row's history.
func (w *worker) call(kind, lock string, token uint64, value string, set ...func(o *Op)) *Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.callLocked(kind, lock, token, value, set...)
}

func (w *worker) callLocked(kind, lock string, token uint64, value string, set ...func(o *Op)) *Op {
	w.seq++
	o := &Op{Client: w.client, Seq: w.seq, Kind: kind, Lock: lock, Token: token, Value: value, Call: Mono()}
	for _, f := range set {
		f(o)
	}
	w.rec.write(o)
	return o
}

// ret records its end. An unknown outcome moves the worker to a new
// client id: the open operation may still take effect.
func (w *worker) ret(o *Op, outcome string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.retLocked(o, outcome, err)
}

func (w *worker) retLocked(o *Op, outcome string, err error) {
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
	return w.timedFor(4*w.cfg.TTL, f)
}

func (w *worker) timedFor(d time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return f(ctx)
}

// lockTTL picks this iteration's per-lock TTL (0: the client's own).
func (w *worker) lockTTL() time.Duration {
	switch w.cfg.TTLs {
	case TTLShortLocks:
		return time.Duration(1+w.rng.IntN(2)) * w.cfg.TTL
	case TTLLongLocks:
		if w.rng.IntN(2) == 0 {
			return 4 * w.cfg.TTL
		}
	}
	return 0
}

func (w *worker) iteration() {
	if !w.cfg.LocksOnly {
		if w.rng.IntN(5) == 0 {
			w.leader(electionName(w.rng.IntN(Elections)))
		}
		switch w.rng.IntN(10) {
		case 0:
			w.election()
			return
		case 1:
			w.modes()
			return
		}
	}
	id := w.rng.IntN(w.cfg.Locks)
	name := "lock-" + strconv.Itoa(id)
	if w.rng.IntN(4) == 0 {
		w.status(name)
	}
	st := w.stores[pick(w.rng, w.names)]
	inTx := w.rng.IntN(2) == 0
	ttl := w.lockTTL()
	var opts []client.Option
	if ttl != 0 {
		opts = append(opts, client.WithTTL(ttl))
	} else {
		ttl = w.cfg.dialTTL()
	}
	w.mu.Lock()
	w.acquiring = w.callLocked("acquire", name, 0, "", func(o *Op) { o.TTL = ttl })
	w.mu.Unlock()
	var l *client.Lease
	// Long enough to outwait a holder with a long per-lock TTL.
	err := w.timedFor(8*w.cfg.TTL, func(ctx context.Context) (err error) { l, err = w.cl.Lock(ctx, name, opts...); return err })
	w.mu.Lock()
	acq := w.acquiring // leaseLost may have split it
	w.acquiring = nil
	w.mu.Unlock()
	if err != nil {
		w.ret(acq, Unknown, err) // a grant may have happened (and been undone)
		time.Sleep(w.cfg.TTL / 10)
		return
	}
	acq.Token, acq.Lease, acq.ValidUntil, acq.Seen = l.Token(), l.LeaseNumber(), monoAt(l.Deadline()), Mono()
	w.ret(acq, OK, nil)
	for l != nil && w.critical(l, st, inTx, id, name, l.Token()) {
		if w.rng.IntN(4) == 0 { // a quarter of the turns take the lock again in one call
			l = w.relock(l, name, ttl)
			continue
		}
		rel := w.call("release", name, l.Token(), "")
		switch err := w.timed(l.Release); {
		case err == nil:
			w.ret(rel, OK, nil)
		case errors.Is(err, client.ErrExpired):
			w.ret(rel, Fail, err)
		default:
			w.ret(rel, Unknown, err)
		}
		return
	}
}

// relock releases l's grant and takes the lock again in one call
// (Lease.Relock), recorded as what it is to every check: a release of l's
// token and an acquire, both called when the relock was (the client ends
// the old Lease before it sends). It returns the new grant, or nil.
func (w *worker) relock(l *client.Lease, name string, ttl time.Duration) *client.Lease {
	rel := w.call("release", name, l.Token(), "")
	acq := w.call("acquire", name, 0, "", func(o *Op) { o.TTL, o.Call = ttl, rel.Call })
	var next *client.Lease
	err := w.timedFor(8*w.cfg.TTL, func(ctx context.Context) (err error) { next, err = l.Relock(ctx); return err })
	switch {
	case err == nil:
		w.ret(rel, OK, nil)
		acq.Token, acq.Lease, acq.ValidUntil, acq.Seen = next.Token(), next.LeaseNumber(), monoAt(next.Deadline()), Mono()
		w.ret(acq, OK, nil)
		return next
	case errors.Is(err, client.ErrRevoked): // the grant had ended: nothing released, nothing queued
		w.ret(rel, Fail, err)
		w.ret(acq, Fail, err)
	default: // the session ended, or the wait: released or not, granted and given back or not
		w.ret(rel, Unknown, err)
		w.ret(acq, Unknown, err)
	}
	time.Sleep(w.cfg.TTL / 10)
	return nil
}

// critical is the work under the lock: claim the row (committed on its
// own), read it — inside a REPEATABLE READ transaction when inTx, so that
// the read fixes the transaction's snapshot — check the lease, work (where
// pauses land), write value+1 with the guarded update (inside the same
// transaction, then commit), then get and put the fenced key. It returns
// false if it gave up on the lease (then there is nothing to release).
func (w *worker) critical(l *client.Lease, st *store, inTx bool, id int, name string, tok uint64) bool {
	op := func(kind string, token uint64, value string, set ...func(o *Op)) *Op {
		return w.call(kind, name, token, value, append(set, func(o *Op) { o.Store, o.Tx = st.name, inTx })...)
	}
	if w.cfg.Fencing {
		claim := op("claim", tok, "")
		if !w.dbResult(claim, w.timed(func(ctx context.Context) error { return w.claim(ctx, st, l, id) })) {
			return true
		}
	}
	var tx *sql.Tx
	var q interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	} = st.db
	if inTx {
		// The transaction's own context is not timed per call: it lives
		// from the read to the commit, through the work and any pause.
		var err error
		if tx, err = st.db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead}); err != nil {
			return true
		}
		defer tx.Rollback() //nolint:errcheck // after a commit it does nothing
		q = tx
	}
	read := op("read", 0, "")
	var value, fence int64
	if err := w.timed(func(ctx context.Context) error {
		return q.QueryRowContext(ctx, "SELECT value, fence FROM "+w.cfg.Table+" WHERE id = "+st.ph(1), id).Scan(&value, &fence)
	}); err != nil {
		w.ret(read, Unknown, err)
		return true
	}
	read.Value, read.Token = strconv.FormatInt(value, 10), uint64(fence)
	w.ret(read, OK, nil)

	if err := l.Err(); err != nil {
		return false // a careful holder checks its lease before the work...
	}
	valid, seen := monoAt(l.Deadline()), Mono()
	// ...but the work takes time, and a pause here outlives the lease: only
	// the token stops the write that follows.
	time.Sleep(time.Duration(w.rng.Int64N(int64(w.cfg.TTL / 2))))
	believed := func(o *Op) { o.ValidUntil, o.Seen = valid, seen }
	write := op("write", tok, strconv.FormatInt(value+1, 10), believed)
	err := w.timed(func(ctx context.Context) error { return w.write(ctx, st, q, l, id, value+1) })
	if tx != nil {
		if err != nil {
			if !errors.Is(err, fencing.ErrStale) {
				err = &noEffect{err} // rolled back: the write never happened
			}
		} else if err = tx.Commit(); err != nil {
			err = fmt.Errorf("commit: %w", err) // it may have committed
		}
	}
	if !w.dbResult(write, err) {
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
	put := w.call("kvput", name, tok, fmt.Sprintf("%s#%d", w.client, w.seq+1), believed)
	w.dbResult(put, w.timed(func(ctx context.Context) error { return w.cl.Put(ctx, name, []byte(put.Value), tok) }))
	return true
}

// noEffect wraps the error of a write whose transaction was rolled back.
type noEffect struct{ err error }

func (e *noEffect) Error() string { return "rolled back: " + e.err.Error() }
func (e *noEffect) Unwrap() error { return e.err }

// write stores the row's new value under the lease's grant: through the
// fencing package (its signed token, when the rows take only those), or, in
// the control run, with the same statement minus the check.
func (w *worker) write(ctx context.Context, st *store, db fencing.DB, l *client.Lease, id int, value int64) error {
	set := map[string]any{"value": value}
	switch {
	case !w.cfg.Fencing:
		_, err := db.ExecContext(ctx, "UPDATE "+w.cfg.Table+" SET value = "+st.ph(1)+", fence = "+st.ph(2)+" WHERE id = "+st.ph(3), value, int64(l.Token()), id)
		return err
	case w.cfg.TokenPub != "":
		return st.table.UpdateSigned(ctx, fencing.SQL(db), l.SignedToken(), id, set)
	}
	return st.table.Update(ctx, db, l.Token(), id, set)
}

// claim records the lease's grant on the row, committed on its own.
func (w *worker) claim(ctx context.Context, st *store, l *client.Lease, id int) error {
	if w.cfg.TokenPub != "" {
		return st.table.UpdateSigned(ctx, fencing.SQL(st.db), l.SignedToken(), id, nil)
	}
	return st.table.Claim(ctx, st.db, l.Token(), id)
}

// dbResult records a fenced write's outcome and reports whether it went through.
func (w *worker) dbResult(o *Op, err error) bool {
	var ne *noEffect
	var pe *pgconn.PgError
	switch {
	case err == nil:
		w.ret(o, OK, nil)
		return true
	case errors.Is(err, client.ErrIndeterminate): // a Put refused as stale after an attempt that may have written
		w.ret(o, Unknown, err)
	case errors.Is(err, fencing.ErrStale):
		var se *fencing.StaleError
		if errors.As(err, &se) {
			o.Highest = uint64(se.Highest)
		}
		w.ret(o, Stale, err)
	case errors.Is(err, fencing.ErrBadSignature):
		w.ret(o, BadSignature, err) // refused before the database saw it
	case errors.As(err, &ne) && errors.As(err, &pe) && pe.Code == "40001":
		// PostgreSQL's REPEATABLE READ refusing a write to a row changed
		// since the snapshot: the other way a stale write in a
		// transaction is refused (see fencing.Table.Update).
		w.ret(o, Serialization, err)
	case errors.As(err, &ne):
		w.ret(o, Fail, err)
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

// Elections is how many elections the workers campaign in:
// election-0, election-1.
const Elections = 2

// electionName is the name of election i.
func electionName(i int) string { return "election-" + strconv.Itoa(i) }

// isElection reports whether name is one of the workers' elections.
func isElection(name string) bool {
	for i := range Elections {
		if name == electionName(i) {
			return true
		}
	}
	return false
}

// election campaigns in an election, proclaims new values now and then
// (with pauses between, where faults land), reads the leader and resigns.
// Every call is recorded for the election model (histcheck.Elections).
func (w *worker) election() {
	name := electionName(w.rng.IntN(Elections))
	value := fmt.Sprintf("%s#%d", w.client, w.seq+1)
	camp := w.call("campaign", name, 0, value)
	var ld *client.Leadership
	err := w.timedFor(8*w.cfg.TTL, func(ctx context.Context) (err error) { ld, err = w.cl.Campaign(ctx, name, value); return err })
	switch {
	case err == nil:
		camp.Token = ld.Token()
		w.ret(camp, OK, nil)
	case errors.Is(err, client.ErrIndeterminate): // the value may have been written
		w.ret(camp, Unknown, err)
		return
	default: // not elected, or elected and given back before writing
		w.ret(camp, Fail, err)
		return
	}
	for range w.rng.IntN(3) {
		time.Sleep(time.Duration(w.rng.Int64N(int64(w.cfg.TTL / 2))))
		v := fmt.Sprintf("%s#%d", w.client, w.seq+1)
		p := w.call("proclaim", name, ld.Token(), v)
		switch err := w.timed(func(ctx context.Context) error { return ld.Proclaim(ctx, v) }); {
		case err == nil:
			w.ret(p, OK, nil)
		case errors.Is(err, client.ErrIndeterminate): // deposed too, maybe, after an earlier attempt that may have written
			w.ret(p, Unknown, err)
		case errors.Is(err, client.ErrDeposed):
			w.ret(p, Stale, err)
		default: // refused before it was sent: the leadership had ended here
			w.ret(p, Fail, err)
		}
	}
	w.leader(name)
	res := w.call("resign", name, ld.Token(), "")
	switch err := w.timed(ld.Resign); {
	case err == nil:
		w.ret(res, OK, nil)
	case errors.Is(err, client.ErrExpired) || errors.Is(err, client.ErrRevoked):
		w.ret(res, Fail, err) // the leadership had ended before
	default:
		w.ret(res, Unknown, err)
	}
}

// leader reads who leads the election name.
func (w *worker) leader(name string) {
	o := w.call("leader", name, 0, "")
	var l client.Leader
	switch err := w.timed(func(ctx context.Context) (err error) { l, err = w.cl.Leader(ctx, name); return err }); {
	case err == nil:
		o.Token, o.Value = l.Token, l.Value
		w.ret(o, OK, nil)
	case errors.Is(err, client.ErrNoLeader):
		w.ret(o, Fail, err)
	default:
		w.ret(o, Unknown, err)
	}
}

// The semaphore and the read-write lock the workers take turns on.
const (
	SemaphoreName    = "sem-0"
	SemaphorePermits = 2
	RWLockName       = "rw-0"
)

// modes takes a permit of the semaphore, or the read-write lock as a
// reader or a writer, holds it a while (where pauses land) and releases
// it. Every call is recorded for the modes model (histcheck.Modes) and the
// per-slot validity windows.
func (w *worker) modes() {
	name, permits, shared := SemaphoreName, SemaphorePermits, false
	if w.rng.IntN(2) == 0 {
		name, permits, shared = RWLockName, 1, w.rng.IntN(3) != 0
	}
	mode := func(o *Op) { o.Permits, o.Shared = permits, shared }
	acq := w.call("macquire", name, 0, "", mode)
	var l *client.Lease
	err := w.timedFor(8*w.cfg.TTL, func(ctx context.Context) (err error) {
		switch {
		case name == SemaphoreName:
			l, err = w.cl.Semaphore(name, permits).Acquire(ctx)
		case shared:
			l, err = w.cl.RWLock(name).RLock(ctx)
		default:
			l, err = w.cl.RWLock(name).Lock(ctx)
		}
		return err
	})
	if err != nil {
		w.ret(acq, Unknown, err) // a grant may have happened (and been undone)
		return
	}
	acq.Token, acq.Slot, acq.Lease, acq.ValidUntil, acq.Seen = l.Token(), l.Slot(), l.LeaseNumber(), monoAt(l.Deadline()), Mono()
	w.ret(acq, OK, nil)
	time.Sleep(time.Duration(w.rng.Int64N(int64(w.cfg.TTL / 2))))
	rel := w.call("mrelease", name, l.Token(), "", mode, func(o *Op) { o.Slot, o.ValidUntil, o.Seen = l.Slot(), monoAt(l.Deadline()), Mono() })
	switch err := w.timed(l.Release); {
	case err == nil:
		w.ret(rel, OK, nil)
	case errors.Is(err, client.ErrExpired) || errors.Is(err, client.ErrRevoked):
		w.ret(rel, Fail, err)
	default:
		w.ret(rel, Unknown, err)
	}
}
