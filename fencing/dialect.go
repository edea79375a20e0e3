package fencing

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Dialect is the SQL flavour of a database: placeholders and identifier quoting.
type Dialect struct {
	name        string
	placeholder func(n int) string
	quoteChar   string
	// columnQuery counts a column of a table: args (schema, or "" for the
	// connection's own; table; column).
	columnQuery string
	// exactKeyTypes narrows columnQuery to the column types whose text
	// (exactText) does not depend on session settings: integers and
	// character strings (a DATE's text follows DateStyle, a TIMESTAMP's
	// the time zone). "" where every type's text is fixed (SQLite).
	exactKeyTypes string
	// lockRead ends a SELECT that decides whether a write was stale. It must
	// read the newest committed row, not the caller's snapshot: MySQL's
	// REPEATABLE READ serves a plain SELECT from the transaction's first
	// read, so a row a newer holder has written since looks unchanged there.
	// A locking read (FOR UPDATE) always reads the newest version. SQLite
	// has no FOR UPDATE and needs none: a transaction that read before a
	// newer commit cannot write at all (SQLITE_BUSY_SNAPSHOT).
	lockRead string
	// nowMicros is the database's clock in microseconds since 1970, read
	// by the ledger so that every worker's claim is timed by one clock.
	// MySQL's is @@timestamp (the statement's start), which, unlike
	// UNIX_TIMESTAMP(NOW(6)), does not depend on the session's time zone.
	nowMicros string
	// exactText is the SQL for a column's value as text, compared byte for
	// byte: a signed write matches its row only where the stored key reads
	// exactly as the text its lock name was computed from (the database's
	// own equality would let "01" select row 1, or 'A' select 'a' under a
	// case-insensitive collation).
	exactText func(col string) string
	// keyType is the column type of the string keys of the tables this
	// package creates (the ledger's action keys, SQLStore's resource keys):
	// compared byte for byte, as the lock names they map to are. MySQL's
	// VARCHAR compares under a collation that ignores case and trailing
	// spaces ('Carts ' = 'carts'), so there it is VARBINARY, of the bytes
	// 255 characters of utf8mb4 may take.
	keyType string
}

// The supported databases.
var (
	// Postgres: PostgreSQL, through database/sql (pgx's stdlib driver, lib/pq) or pgx (package fencingpgx).
	Postgres = &Dialect{name: "postgres", placeholder: func(n int) string { return "$" + strconv.Itoa(n) }, quoteChar: `"`,
		columnQuery:   `SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = COALESCE(NULLIF($1, ''), current_schema()) AND table_name = $2 AND column_name = $3`,
		exactKeyTypes: ` AND data_type IN ('smallint', 'integer', 'bigint', 'character varying', 'character', 'text')`,
		lockRead:      " FOR UPDATE", nowMicros: "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
		// The CASE guards each row, whatever schema the session resolves
		// the table in: a key of another type has no exact text (NULL).
		exactText: func(col string) string {
			// A domain's own type is its base type here, as in the catalog
			// check (information_schema reports a domain column's base type).
			return "CASE WHEN (SELECT CASE WHEN typtype = 'd' THEN typbasetype ELSE oid END FROM pg_type WHERE oid = pg_typeof(" + col + ")) IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype, 'text'::regtype, 'character varying'::regtype, 'character'::regtype) THEN CAST(" + col + ` AS TEXT) END COLLATE "C"`
		}, keyType: "VARCHAR(255)"}
	// MySQL: MySQL and MariaDB (go-sql-driver/mysql).
	MySQL = &Dialect{name: "mysql", placeholder: func(int) string { return "?" }, quoteChar: "`",
		columnQuery:   `SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ? AND column_name = ?`,
		exactKeyTypes: ` AND data_type IN ('tinyint', 'smallint', 'mediumint', 'int', 'bigint', 'char', 'varchar', 'tinytext', 'text', 'mediumtext', 'longtext', 'binary', 'varbinary')`,
		lockRead:      " FOR UPDATE", nowMicros: "CAST(@@timestamp * 1000000 AS SIGNED)",
		exactText: func(col string) string { return "CAST(CONVERT(" + col + " USING utf8mb4) AS BINARY)" }, keyType: "VARBINARY(1020)"}
	// SQLite (modernc.org/sqlite, mattn/go-sqlite3).
	SQLite = &Dialect{name: "sqlite", placeholder: func(int) string { return "?" }, quoteChar: `"`,
		columnQuery: `SELECT COUNT(*) FROM pragma_table_info(?2, COALESCE(NULLIF(?1, ''), 'main')) WHERE name = ?3`,
		nowMicros:   "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)",
		exactText:   func(col string) string { return "CAST(" + col + " AS TEXT) COLLATE BINARY" }, keyType: "VARCHAR(255)"}
)

func (d *Dialect) String() string { return d.name }

// onConflictDoNothing ends an INSERT so that a row whose key columns
// already exist is left alone and counted as 0 rows — on MySQL, unless the
// DSN sets clientFoundRows: then the row it left alone counts 1, as a new
// row does, so there a count of 1 does not say the row is new (insertNew
// does). (Not MySQL's INSERT IGNORE, which also turns other errors, such
// as a key too long, into warnings.)
func (d *Dialect) onConflictDoNothing(keyColumns ...string) string {
	if d == MySQL {
		return " ON DUPLICATE KEY UPDATE " + keyColumns[0] + " = " + keyColumns[0]
	}
	return " ON CONFLICT (" + strings.Join(keyColumns, ", ") + ") DO NOTHING"
}

// insertNew returns the start (up to the column list) and the end of an
// INSERT into table that adds its row only if keyColumn's value is new,
// and counts 1 row if it added it and 0 if not, whatever the DSN says of
// clientFoundRows: on MySQL, INSERT IGNORE (which touches no existing
// row, so there is no found row to count); elsewhere onConflictDoNothing.
// INSERT IGNORE also turns other errors into warnings: a value too long
// for its column is cut to fit, and the row is added and counted. Use it
// only for rows whose values all fit the columns this package created,
// and read the row back.
func (d *Dialect) insertNew(table, keyColumn string) (start, end string) {
	if d == MySQL {
		return "INSERT IGNORE INTO " + table, ""
	}
	return "INSERT INTO " + table, d.onConflictDoNothing(keyColumn)
}

// binaryKey makes a string key column of a table this package created
// compare byte for byte: on MySQL a VARCHAR made by an earlier version
// becomes VARBINARY (its bytes are kept). Elsewhere VARCHAR already does.
func (d *Dialect) binaryKey(ctx context.Context, r Runner, table, quotedTable, column string) error {
	if d != MySQL {
		return nil
	}
	schema, name := splitName(table)
	n, _, err := r.QueryInt64(ctx, d.columnQuery+` AND data_type <> 'varbinary'`, schema, name, column)
	if err != nil {
		return fmt.Errorf("fencing: look at %s.%s: %w", table, column, err)
	}
	if n == 0 {
		return nil
	}
	if _, err := r.Exec(ctx, "ALTER TABLE "+quotedTable+" MODIFY "+column+" "+d.keyType+" NOT NULL"); err != nil {
		return fmt.Errorf("fencing: make %s.%s compare byte for byte (VARBINARY): %w", table, column, err)
	}
	return nil
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// quote quotes an identifier, optionally schema-qualified (a.b). Identifiers
// come from the program, never from requests; they are still checked.
func (d *Dialect) quote(ident string) (string, error) {
	parts := strings.Split(ident, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("fencing: identifier %q has more than one dot", ident)
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", fmt.Errorf("fencing: identifier %q: use letters, digits and underscores", ident)
		}
		parts[i] = d.quoteChar + p + d.quoteChar
	}
	return strings.Join(parts, "."), nil
}

// query builds one SQL statement with numbered placeholders and its args.
type query struct {
	d    *Dialect
	sql  strings.Builder
	args []any
}

func (q *query) text(s ...string) *query {
	for _, x := range s {
		q.sql.WriteString(x)
	}
	return q
}

func (q *query) arg(v any) *query {
	q.args = append(q.args, v)
	q.sql.WriteString(q.d.placeholder(len(q.args)))
	return q
}

// Quote quotes an identifier, optionally schema-qualified ("app.totals"), for
// this dialect; it refuses anything but letters, digits and underscores.
// For packages that build their own statements (package dblock).
func (d *Dialect) Quote(ident string) (string, error) { return d.quote(ident) }

// Placeholder is the n-th (from 1) bind parameter of a statement: $n or ?.
func (d *Dialect) Placeholder(n int) string { return d.placeholder(n) }
