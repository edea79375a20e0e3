package dblock

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencehq/fence/fencing"
)

// ForUpdate builds the statement that locks the row of table whose key
// columns equal the statement's parameters (one each, in order):
//
//	SELECT 1 FROM "t" WHERE "k1" = $1 AND "k2" = $2 FOR UPDATE [NOWAIT | SKIP LOCKED]
//
// Table and column names are quoted and must be letters, digits and
// underscores (the table optionally schema-qualified); they come from your
// program, never from a request.
func ForUpdate(d *fencing.Dialect, table string, key []string, w Wait) (string, error) {
	if d == nil {
		d = fencing.Postgres
	}
	if len(key) == 0 {
		return "", fmt.Errorf("%w: table %q: name its key column(s)", ErrBadInput, table)
	}
	t, err := d.Quote(table)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	var b strings.Builder
	b.WriteString("SELECT 1 FROM " + t + " WHERE ")
	for i, k := range key {
		q, err := d.Quote(k)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(q + " = " + d.Placeholder(i+1))
	}
	b.WriteString(" FOR UPDATE")
	switch w {
	case Block:
	case NoWait:
		b.WriteString(" NOWAIT")
	case SkipLocked:
		b.WriteString(" SKIP LOCKED")
	default:
		return "", fmt.Errorf("%w: Wait %v", ErrBadInput, w)
	}
	return b.String(), nil
}

// LockRow locks the row of table with this key (one value per key column)
// in the transaction r runs in (fencing.SQL(tx) for a *sql.Tx,
// fencingpgx.Runner(tx) for a pgx.Tx), until that transaction ends. On
// Postgres it first sets lock_timeout and
// idle_in_transaction_session_timeout for the rest of the transaction (SET
// LOCAL). found is false if there is no such row, or (SkipLocked) it is
// locked. A wait past the timeout fails with ErrLockTimeout, NoWait on a
// locked row with ErrNotAvailable, a deadlock with ErrDeadlock; roll the
// transaction back after any error.
func LockRow(ctx context.Context, r fencing.Runner, o Options, table string, key []string, values ...any) (found bool, err error) {
	if o, err = o.check(nil, true); err != nil {
		return false, err
	}
	if len(values) != len(key) {
		return false, fmt.Errorf("%w: table %q: %d key columns, %d values", ErrBadInput, table, len(key), len(values))
	}
	q, err := ForUpdate(o.Dialect, table, key, o.Wait)
	if err != nil {
		return false, err
	}
	if o.Dialect == fencing.Postgres {
		if err := setLocal(ctx, r, o, true); err != nil {
			return false, Classify(err, o.Wait)
		}
	}
	_, found, err = r.QueryInt64(ctx, q, values...)
	if err != nil {
		return false, fmt.Errorf("dblock: lock a row of %s: %w", table, Classify(err, o.Wait))
	}
	return found, nil
}
