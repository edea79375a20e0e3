package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// TokenHeader is the request header that carries the caller's fencing token.
// A refused request gets TokenHighestHeader in the 409 response.
const (
	TokenHeader        = "Fence-Token"
	TokenHighestHeader = "Fence-Token-Highest"
)

// TokenStore keeps the highest token accepted per resource key.
type TokenStore interface {
	// Advance records token for key if it is at least the highest so far
	// and limit allows it (limit.Check), atomically. It returns the highest
	// token after the call and whether token was accepted; a token above
	// limit changes nothing and returns an error matching ErrTooHigh.
	Advance(ctx context.Context, key string, token Token, limit Limit) (highest Token, ok bool, err error)
}

// MiddlewareConfig configures Middleware.
type MiddlewareConfig struct {
	Store TokenStore // required: NewMemoryStore, or NewSQLStore to share across instances
	// Resource names what a request writes (e.g. the URL path, or an id from
	// it); tokens are compared per resource. Required.
	Resource func(*http.Request) string
	Observer Observer // optional; refusals are reported with table "http"
	// Limit refuses tokens far above what was issued, with 400 Bad Request
	// (see Limit). The zero Limit accepts any token.
	Limit Limit
	// Verifier, if set, makes Fence-Token carry a signed token (the text of
	// Lease.SignedToken) issued for the lock LockName names for the request;
	// a plain token, a forged or altered one, or one for another lock gets
	// 403 Forbidden and next never runs.
	Verifier *Verifier
	// LockName returns the lock whose holders may make the request; nil
	// means Resource (the lock is named like the resource).
	LockName func(*http.Request) string
}

// Middleware lets your own HTTP API refuse stale holders: every request that
// is not GET, HEAD or OPTIONS must carry Fence-Token (signed, with a
// Verifier); if that token is lower
// than the highest token the resource has accepted, the request gets 409
// Conflict (with both tokens) and next never runs. Requests for one resource
// are run one at a time in this process, so a request that passed the check
// finishes before a newer one starts here.
//
// Caveat: with several API instances, the SQL store shares the check, but a
// request that passed it on one instance can still finish after a newer one
// on another. Where that matters, make the handler's own write a
// Table.Update with the same token.
func Middleware(cfg MiddlewareConfig, next http.Handler) http.Handler {
	var locks keyedMutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		raw := r.Header.Get(TokenHeader)
		if raw == "" {
			http.Error(w, "send your lock's fencing token in the "+TokenHeader+" header", http.StatusPreconditionRequired)
			return
		}
		key := cfg.Resource(r)
		name := key
		if cfg.LockName != nil {
			name = cfg.LockName(r)
		}
		cw := CheckedWrite{Table: "http", Mode: Enforce, Lock: name}
		if wo, ok := cfg.Observer.(WriteObserver); ok {
			defer func() { wo.Checked(r.Context(), cw) }()
		}
		var token Token
		if cfg.Verifier != nil {
			var err error
			if token, err = cfg.Verifier.VerifyFor(raw, name, key); err != nil {
				cw.Err = err
				observeRefusal(cfg.Observer, "http", Enforce, err)
				writeJSON(w, http.StatusForbidden, map[string]any{"error": err.Error(), "resource": key})
				return
			}
			if g, err := cfg.Verifier.Verify(raw); err == nil { // verified just now: from the cache
				cw.Lease = g.Lease
			}
		} else {
			var err error
			token, err = strconv.ParseUint(raw, 10, 64)
			if err != nil || token == 0 {
				cw.Err = fmt.Errorf("fencing: %s %q is not a positive integer", TokenHeader, raw)
				http.Error(w, TokenHeader+" must be a positive integer (the token of your lock grant)", http.StatusBadRequest)
				return
			}
		}
		cw.Token = token
		unlock := locks.lock(key)
		defer unlock()
		highest, ok, err := cfg.Store.Advance(r.Context(), key, token, cfg.Limit)
		var tooHigh *TooHighError
		if errors.As(err, &tooHigh) {
			cw.Err = err
			observeRefusal(cfg.Observer, "http", Enforce, err)
			writeJSON(w, http.StatusBadRequest, map[string]any{
				"error":    fmt.Sprintf("fencing token %d is above the limit %d for %s: no lock grant issued it", token, tooHigh.Ceiling, key),
				"resource": key, "offered": token, "ceiling": tooHigh.Ceiling})
			return
		}
		if err != nil {
			cw.Err = err
			http.Error(w, "fencing store unavailable", http.StatusServiceUnavailable)
			return
		}
		if !ok {
			cw.Stale = &StaleError{Resource: key, Offered: token, Highest: highest}
			cw.Err = cw.Stale
			if cfg.Observer != nil {
				cfg.Observer.Stale("http", Enforce, token, highest)
			}
			w.Header().Set(TokenHighestHeader, strconv.FormatUint(highest, 10))
			writeJSON(w, http.StatusConflict, map[string]any{
				"error":    fmt.Sprintf("stale fencing token: %d < %d; a newer holder has written %s: stop, re-acquire, read fresh data", token, highest, key),
				"resource": key, "offered": token, "highest": highest})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSON answers with status and body as JSON.
func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// keyedMutex serialises work per key; entries are freed when unused.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// MemoryStore is a TokenStore in this process's memory. Safe for concurrent use.
type MemoryStore struct {
	mu sync.Mutex
	m  map[string]Token
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{m: map[string]Token{}} }

// Advance implements TokenStore.
func (s *MemoryStore) Advance(_ context.Context, key string, token Token, limit Limit) (Token, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.m[key]
	if token < h {
		return h, false, nil
	}
	if err := limit.Check(key, h, token); err != nil {
		return h, false, err
	}
	s.m[key] = token
	return token, true, nil
}

// SQLStore is a TokenStore in a database table (resource_key, fence), shared
// by every instance that uses the same table.
type SQLStore struct {
	db    DB
	table *Table
}

// NewSQLStore keeps tokens in table on db (create it with EnsureTable).
func NewSQLStore(d *Dialect, db DB, table string) (*SQLStore, error) {
	t, err := NewTable(TableConfig{Dialect: d, Name: table, Key: []string{"resource_key"}})
	if err != nil {
		return nil, err
	}
	return &SQLStore{db: db, table: t}, nil
}

// EnsureTable creates the store's table if it does not exist, with
// resource keys compared byte for byte (on MySQL, it turns the VARCHAR of a
// table made by an earlier version into VARBINARY).
func (s *SQLStore) EnsureTable(ctx context.Context) error {
	d := s.table.cfg.Dialect
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.table.name+
		" (resource_key "+d.keyType+" NOT NULL PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0)"); err != nil {
		return err
	}
	return d.binaryKey(ctx, sqlRunner{s.db}, s.table.cfg.Name, s.table.name, "resource_key")
}

// Advance implements TokenStore with one guarded update (for a resource
// seen for the first time: an insert, then the update again).
func (s *SQLStore) Advance(ctx context.Context, key string, token Token, limit Limit) (Token, bool, error) {
	for attempt := 0; attempt < 3; attempt++ {
		err := s.table.update(ctx, sqlRunner{s.db}, credential{token: token}, key, nil, limit)
		var stale *StaleError
		switch {
		case err == nil:
			return token, true, nil
		case errors.As(err, &stale):
			return stale.Highest, false, nil
		case !errors.Is(err, ErrNoRow):
			return 0, false, err
		}
		if err := limit.Check(key, 0, token); err != nil {
			return 0, false, err
		}
		q := &query{d: s.table.cfg.Dialect}
		q.text("INSERT INTO ", s.table.name, " (resource_key, fence) VALUES (").arg(key).text(", ").arg(int64(token)).text(")",
			q.d.onConflictDoNothing("resource_key"))
		if _, err := s.db.ExecContext(ctx, q.sql.String(), q.args...); err != nil {
			return 0, false, err
		}
		// This INSERT or another instance's created the row: the guarded
		// update decides. (Not the INSERT's count: on MySQL with the DSN's
		// clientFoundRows, a row it left alone counts 1, as a new one.)
	}
	return 0, false, fmt.Errorf("fencing: token store: resource %q kept changing; retry", key)
}

// ModeHandler is an operator endpoint to read and switch the mode of tables
// at run time, without a deploy. GET returns {"table": "mode", …};
// POST with form values table=<name>&mode=<off|observe|enforce> switches one.
// Mount it where only operators can reach it.
func ModeHandler(tables ...*Table) http.Handler {
	byName := map[string]*Table{}
	for _, t := range tables {
		byName[t.Name()] = t
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			t := byName[r.FormValue("table")]
			if t == nil {
				http.Error(w, "unknown table "+strconv.Quote(r.FormValue("table")), http.StatusNotFound)
				return
			}
			var m Mode
			if err := m.UnmarshalText([]byte(r.FormValue("mode"))); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			t.SetMode(m)
		} else if r.Method != http.MethodGet {
			http.Error(w, "use GET or POST", http.StatusMethodNotAllowed)
			return
		}
		modes := map[string]string{}
		for name, t := range byName {
			modes[name] = t.Mode().String()
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(modes)
	})
}
