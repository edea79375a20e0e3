package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/fencehq/fence/bench/peers"
)

// leaderHTTP is a system whose leader serves /debug/pprof (fence).
type leaderHTTP interface {
	LeaderHTTP(ctx context.Context) (string, *http.Client, error)
}

// profileLeader saves, while a scenario runs, a CPU profile and an
// execution trace of the system's leader into dir, as
// <label>-<scenario>.cpu.pprof and .trace (label: the system as --systems
// names it; `go tool trace -pprof=syscall` turns the trace into where the
// time blocked in system calls went), and a CPU profile of the clients,
// this process, over the same window (<label>-<scenario>.clients.cpu.pprof):
// they share the machine's cores with the servers. It starts after a
// warm-up of a fifth of d and returns when all three are saved.
func profileLeader(ctx context.Context, sys system, label, scenario, dir string, d time.Duration) error {
	lh, ok := sys.(leaderHTTP)
	if !ok {
		return nil
	}
	select {
	case <-time.After(d / 5):
	case <-ctx.Done():
		return ctx.Err()
	}
	leaderURL, hc, err := lh.LeaderHTTP(ctx)
	if err != nil {
		return err
	}
	secs := max(1, int(d/time.Second)/2)
	base := filepath.Join(dir, fmt.Sprintf("%s-%s", label, scenario))
	errs := make(chan error, 3)
	go func() { errs <- profileSelf(ctx, base+".clients.cpu.pprof", time.Duration(secs)*time.Second) }()
	go func() {
		errs <- save(ctx, hc, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", leaderURL, secs), base+".cpu.pprof")
	}()
	go func() {
		errs <- save(ctx, hc, fmt.Sprintf("%s/debug/pprof/trace?seconds=%d", leaderURL, max(1, secs/2)), base+".trace")
	}()
	return errors.Join(<-errs, <-errs, <-errs)
}

// profileSelf saves a CPU profile of this process over d.
func profileSelf(ctx context.Context, path string, d time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	pprof.StopCPUProfile()
	return errors.Join(ctx.Err(), f.Close())
}

func save(ctx context.Context, hc *http.Client, url, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := peers.Get(ctx, hc, url, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
