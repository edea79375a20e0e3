package pglease_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencehq/fence/client/pglease"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// Environment of the holder process (this test binary, run again).
const (
	helperEnv = "PGLEASE_HELPER"       // set: run as the holder
	dsnEnv    = "PGLEASE_HELPER_DSN"   // the database
	tableEnv  = "PGLEASE_HELPER_TABLE" // the lease table
	dataEnv   = "PGLEASE_HELPER_DATA"  // the fenced table (id, amount, fence)
)

// holderProcess takes the lock "paused" (TTL 500ms), writes row 77 with its
// token, checks its lease, and says so on stdout; then it waits for a line
// on stdin (the pause lands here, between its check and its next write) and
// writes again, with the same token, without checking, and reports how
// the write went and what the lease says.
func holderProcess() int {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv(dsnEnv))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer db.Close()
	data, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: os.Getenv(dataEnv), Key: []string{"id"}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := pglease.New(db, pglease.WithTable(os.Getenv(tableEnv)), pglease.WithTTL(500*time.Millisecond)).TryLock(ctx, "paused")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := data.Update(ctx, db, l.Token(), 77, map[string]any{"amount": 1}); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", l.Token(), "checked", l.Err())
	bufio.NewReader(os.Stdin).ReadString('\n') // SIGSTOP lands while we wait here
	err = data.Update(ctx, db, l.Token(), 77, map[string]any{"amount": 3})
	fmt.Printf("write stale=%v lease expired=%v err=%v\n", errors.Is(err, fencing.ErrStale), errors.Is(l.Err(), pglease.ErrExpired), err)
	return 0
}

// TestPausedHolderFencedWriteRefused SIGSTOPs a real holder process past
// its TTL, between its check of the lease and its write. Meanwhile another
// holder gets the lock with a larger token (once the database's clock has
// passed the paused lease's expiry) and writes the row; after SIGCONT the
// paused holder's write, with its old token, is refused (ErrStale) and the
// row keeps the new holder's value.
func TestPausedHolderFencedWriteRefused(t *testing.T) {
	pg := dbtest.Postgres()
	db, _, table := setup(t)
	ctx := t.Context()
	dataName := table + "_data"
	if _, err := db.Exec(`CREATE TABLE ` + dataName + ` (id int PRIMARY KEY, amount bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + dataName) })
	db.Exec(`INSERT INTO ` + dataName + ` (id, amount) VALUES (77, 0)`)
	data, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: dataName, Key: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", dsnEnv+"="+pg.DSN, tableEnv+"="+table, dataEnv+"="+dataName)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	lines := bufio.NewScanner(out)
	var token uint64
	if !lines.Scan() {
		t.Fatal("holder printed nothing")
	}
	if _, err := fmt.Sscanf(lines.Text(), "token %d checked <nil>", &token); err != nil {
		t.Fatalf("holder: %s", lines.Text())
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next, err := pglease.New(db, pglease.WithTable(table), pglease.WithPoll(20*time.Millisecond)).Lock(ctx, "paused")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(context.Background())
	if next.Token() <= token {
		t.Fatalf("new holder's token %d, the paused holder had %d", next.Token(), token)
	}
	if err := data.Update(ctx, db, next.Token(), 77, map[string]any{"amount": 2}); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, "write")
	if !lines.Scan() {
		t.Fatal("holder said nothing after SIGCONT")
	}
	if got := lines.Text(); !strings.HasPrefix(got, "write stale=true lease expired=true") {
		t.Fatalf("paused holder: %s", got)
	}
	var amount, fence int64
	db.QueryRow(`SELECT amount, fence FROM `+dataName+` WHERE id = 77`).Scan(&amount, &fence)
	if amount != 2 || uint64(fence) != next.Token() {
		t.Fatalf("row 77: amount %d fence %d, want the new holder's 2 with token %d", amount, fence, next.Token())
	}
	if err := next.Err(); err != nil {
		t.Fatalf("the new holder: %v", err)
	}
}
