//go:build fence_slim

package demo

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestSlimBuildRefusesDSN: a slim build has no Postgres driver, and says so
// before it starts anything (go test -tags fence_slim ./internal/demo).
func TestSlimBuildRefusesDSN(t *testing.T) {
	err := Run(context.Background(), Config{DSN: "postgres://postgres@127.0.0.1:5432/test", Self: "/nonexistent"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "slim build") {
		t.Fatalf("Run with a DSN in a slim build: %v, want the slim-build refusal", err)
	}
}
