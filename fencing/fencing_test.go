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
