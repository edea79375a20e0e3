package fencing_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencehq/fence/fencing"
)

func TestStaleErrorMatches(t *testing.T) {
	err := fmt.Errorf("write totals: %w", &fencing.StaleError{Resource: "totals/77", Offered: 33, Highest: 34})
	if !errors.Is(err, fencing.ErrStale) {
		t.Fatal("StaleError does not match ErrStale")
	}
	var se *fencing.StaleError
	if !errors.As(err, &se) || se.Offered != 33 || se.Highest != 34 {
		t.Fatalf("errors.As: %v", se)
	}
	if got := se.Error(); got != "fencing: stale token for totals/77: 33 < 34 (a newer holder has written; stop)" {
		t.Fatalf("message: %s", got)
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[fencing.Mode]string{fencing.Enforce: "enforce", fencing.Observe: "observe", fencing.Off: "off", 3: "mode(3)", -1: "mode(-1)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", int32(m), got, want)
		}
	}
}

func TestTableNames(t *testing.T) {
	for name, ok := range map[string]bool{"totals": true, "app.totals": true, "a.b.c": false, "x; DROP": false, "": false} {
		_, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.Postgres, Name: name, Key: []string{"id"}})
		if (err == nil) != ok {
			t.Errorf("NewTable(%q): %v, want ok=%v", name, err, ok)
		}
	}
}
