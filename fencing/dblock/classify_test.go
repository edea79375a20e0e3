package dblock_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencehq/fence/fencing/dblock"
)

// TestClassify: each database's lock failure, as its driver returns it
// (wrapped, or joined with another error), matches its typed error and
// still matches the driver's; anything else is returned as it was.
func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("query: %w", &pgconn.PgError{Code: code}) }
	my := func(n uint16) error { return errors.Join(errors.New("rollback: ok"), &mysql.MySQLError{Number: n}) }
	other := errors.New("something else")
	for _, c := range []struct {
		name string
		err  error
		w    dblock.Wait
		want error // nil: err unchanged
	}{
		{"pg lock_timeout", pg("55P03"), dblock.Block, dblock.ErrLockTimeout},
		{"pg NOWAIT", pg("55P03"), dblock.NoWait, dblock.ErrNotAvailable},
		{"pg deadlock", pg("40P01"), dblock.Block, dblock.ErrDeadlock},
		{"pg idle in transaction", pg("25P03"), dblock.Block, dblock.ErrIdleTimeout},
		{"pg unique violation", pg("23505"), dblock.Block, nil},
		{"mysql lock wait timeout", my(1205), dblock.Block, dblock.ErrLockTimeout},
		{"mariadb NOWAIT", my(1205), dblock.NoWait, dblock.ErrNotAvailable},
		{"mysql NOWAIT", my(3572), dblock.NoWait, dblock.ErrNotAvailable},
		{"mysql deadlock", my(1213), dblock.Block, dblock.ErrDeadlock},
		{"mysql GET_LOCK deadlock", my(3058), dblock.Block, dblock.ErrDeadlock},
		{"mysql duplicate key", my(1062), dblock.Block, nil},
		{"other", other, dblock.Block, nil},
		{"already typed", fmt.Errorf("x: %w", dblock.ErrNotAvailable), dblock.Block, dblock.ErrNotAvailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := dblock.Classify(c.err, c.w)
			if c.want == nil {
				if got != c.err {
					t.Errorf("Classify = %v, want the error unchanged", got)
				}
				return
			}
			if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
				t.Errorf("Classify = %v, want it to match %v and the driver's error", got, c.want)
			}
			for _, e := range []error{dblock.ErrLockTimeout, dblock.ErrNotAvailable, dblock.ErrDeadlock, dblock.ErrIdleTimeout} {
				if e != c.want && errors.Is(got, e) {
					t.Errorf("Classify = %v, matches %v too", got, e)
				}
			}
		})
	}
	if dblock.Classify(nil, dblock.Block) != nil {
		t.Error("Classify(nil) != nil")
	}
}

// TestDeps: dblock (and so fencingpgx) does not pull in the MySQL driver
// (it reads MySQL errors by reflection), fence's server side, or testing.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/fencehq/fence/fencing/dblock", "github.com/fencehq/fence/fencing/fencingpgx").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned too little: %q", deps)
	}
	for _, dep := range deps {
		for _, bad := range []string{"github.com/go-sql-driver/", "github.com/fencehq/fence/internal", "github.com/fencehq/fence/client", "go.etcd.io/", "google.golang.org/grpc"} {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("dblock or fencingpgx depends on %s", dep)
			}
		}
		if dep == "testing" {
			t.Error("dblock or fencingpgx depends on testing")
		}
	}
}
