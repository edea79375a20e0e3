package fencing_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/fencehq/fence/fencing"
)

// Storage that takes only signed tokens: a made-up token, or a real grant
// of another lock, changes nothing. Here the "server" signs in-process;
// with fence, the grant's Lease.SignedToken() is what the server signed
// (fence serve --token-key; the dev setup has a key), and the storage
// loads the cluster's public key with fencing.LoadVerifier.
func Example_signedTokens() {
	ctx := context.Background()
	// The cluster's token key: `fence certs create-token-key` makes one
	// (token-key.pem for the servers, token-key.pub.pem for storage).
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	server := fencing.NewSigner(key)
	verifier, _ := fencing.NewVerifier(key.Public().(ed25519.PublicKey))

	dir, _ := os.MkdirTemp("", "fencing-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db"))
	defer db.Close()
	db.Exec(`CREATE TABLE totals (restaurant_id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`)
	db.Exec(`INSERT INTO totals (restaurant_id, amount) VALUES (77, 0)`)

	// Row 77 may be written by holders of the lock "totals/77" only.
	totals, _ := fencing.NewTable(fencing.TableConfig{Dialect: fencing.SQLite, Name: "totals", Key: []string{"restaurant_id"},
		Verifier: verifier, LockName: func(k []string) string { return "totals/" + k[0] }})

	grant77, _ := server.Sign(fencing.Grant{Name: "totals/77", Token: 34, Lease: 5})
	fmt.Println("grant of totals/77:", totals.UpdateSigned(ctx, fencing.SQL(db), grant77, 77, map[string]any{"amount": 42000}))

	grant78, _ := server.Sign(fencing.Grant{Name: "totals/78", Token: 35, Lease: 6})
	err := totals.UpdateSigned(ctx, fencing.SQL(db), grant78, 77, map[string]any{"amount": 1})
	fmt.Println("grant of totals/78:", errors.Is(err, fencing.ErrBadSignature))

	attacker := fencing.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32)))
	forged, _ := attacker.Sign(fencing.Grant{Name: "totals/77", Token: 1 << 62})
	err = totals.UpdateSigned(ctx, fencing.SQL(db), forged, 77, map[string]any{"amount": 2})
	fmt.Println("forged token:", errors.Is(err, fencing.ErrBadSignature))

	err = totals.Update(ctx, db, 1<<62, 77, map[string]any{"amount": 3})
	fmt.Println("plain token:", errors.Is(err, fencing.ErrBadSignature))

	// Your own HTTP API: the Fence-Token header carries the signed token.
	api := fencing.Middleware(fencing.MiddlewareConfig{Store: fencing.NewMemoryStore(), Verifier: verifier,
		Resource: func(r *http.Request) string { return r.URL.Path },
		LockName: func(r *http.Request) string { return "totals" + r.URL.Path }},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, tok := range []string{grant77, grant78} {
		r := httptest.NewRequest(http.MethodPut, "/77", nil)
		r.Header.Set(fencing.TokenHeader, tok)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		fmt.Println("PUT /77:", w.Code)
	}

	// A side effect, at most once, claimed only by holders of its lock.
	ledger, _ := fencing.NewLedger(fencing.SQLite, "ledger")
	ledger.EnsureTable(ctx, db)
	ledger.Verifier = verifier
	ledger.LockName = func(actionKey string) string { return "totals/77" } // every action here belongs to row 77's lock
	ran, err := ledger.OnceSigned(ctx, db, "email:totals-77", grant78, func(context.Context) error { return nil })
	fmt.Println("ledger, grant of totals/78:", ran, errors.Is(err, fencing.ErrBadSignature))
	ran, err = ledger.OnceSigned(ctx, db, "email:totals-77", grant77, func(context.Context) error { return nil })
	fmt.Println("ledger, grant of totals/77:", ran, err)

	var amount, fence int64
	db.QueryRow(`SELECT amount, fence FROM totals WHERE restaurant_id = 77`).Scan(&amount, &fence)
	fmt.Println("row:", amount, "written with token", fence)
	// Output:
	// grant of totals/77: <nil>
	// grant of totals/78: true
	// forged token: true
	// plain token: true
	// PUT /77: 200
	// PUT /77: 403
	// ledger, grant of totals/78: false true
	// ledger, grant of totals/77: true <nil>
	// row: 42000 written with token 34
}
