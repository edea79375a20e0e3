package main

import (
	"testing"

	"github.com/fencehq/fence/internal/bench"
)

// TestRelocks: only a fence system named with +relock relocks, and only in
// the workloads that lock and release; the plain fence and the peers run
// the plain cycle, so the comparison with etcd stays like for like.
func TestRelocks(t *testing.T) {
	for _, tc := range []struct {
		system, workload string
		want             bool
	}{
		{"fence+relock", bench.Contended, true},
		{"fence+relock", bench.Uncontended, true},
		{"fence+tls+relock", bench.Mixed, true},
		{"fence@v0.9+relock", bench.Uncontended, true},
		{"fence+relock", bench.RenewHeavy, false},
		{"fence+relock", bench.ManyLeases, false},
		{"fence", bench.Contended, false},
		{"fence+tls", bench.Contended, false},
		{"etcd", bench.Contended, false},
		{"redis+relock", bench.Contended, false},
	} {
		if got := relocks(tc.system, tc.workload); got != tc.want {
			t.Errorf("relocks(%q, %q) = %v, want %v", tc.system, tc.workload, got, tc.want)
		}
	}
	if _, how, ok := fenceRev("fence+relock+signed"); !ok || !how.Relock || !how.Signed || how.TLS {
		t.Errorf("fence+relock+signed: %+v %v", how, ok)
	}
}
