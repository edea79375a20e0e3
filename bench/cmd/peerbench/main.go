// Command peerbench runs fence and the systems it is compared with — a
// 3-member etcd cluster (embed, fsync on) and Redis (SET NX PX; without and
// with appendfsync always) — one after another on this machine, through
// the same load loops (internal/bench), and prints medians and the ratio to
// etcd. Every system is started fresh for each round and stopped after it.
//
//	cd bench && go run ./cmd/peerbench --runs 3 --duration 10s --out results.json
//	go run ./cmd/plot results.json latency.png
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencehq/fence/bench/peers"
	"github.com/fencehq/fence/internal/bench"
)

// scenario is one measured load.
type scenario struct {
	Name     string `json:"name"`
	Workload string `json:"workload"`
	Clients  int    `json:"clients"`
}

var scenarios = []scenario{
	{"uncontended-64", bench.Uncontended, 64},
	{"contended-16", bench.Contended, 16},
	{"renew-16x64", bench.RenewHeavy, 16},
	{"latency-1", bench.Uncontended, 1},
	{"latency-16", bench.Uncontended, 16},
}

// Results are every run's measurements: system → scenario → one per round.
type Results struct {
	Machine   string                                `json:"machine"`
	Command   string                                `json:"command"`
	Started   time.Time                             `json:"started"`
	Scenarios []scenario                            `json:"scenarios"`
	Runs      map[string]map[string][]*bench.Result `json:"runs"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "etcd-member" {
		etcdMember(os.Args[2:])
		return
	}
	systems := flag.String("systems", "fence,etcd,redis,redis-fsync", "systems to run, in order")
	runs := flag.Int("runs", 3, "rounds (each system fresh in each); medians are over these")
	duration := flag.Duration("duration", 10*time.Second, "length of each measurement")
	only := flag.String("scenarios", "", "comma-separated subset of: "+names())
	out := flag.String("out", "", "write every measurement as JSON here")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, strings.Split(*systems, ","), *runs, *duration, *only, *out); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.Name)
	}
	return strings.Join(n, ",")
}

func etcdMember(args []string) {
	fs := flag.NewFlagSet("etcd-member", flag.ExitOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data dir")
	peer := fs.Int("peer-port", 0, "peer port")
	client := fs.Int("client-port", 0, "client port")
	cluster := fs.String("cluster", "", "initial cluster")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := peers.EtcdMember(ctx, *name, *dir, *peer, *client, *cluster); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(1)
	}
}

// system is one started system under test.
type system interface {
	bench.Target
	Stop()
}

func start(name, dir, fenceBin, self string) (system, error) {
	const ttl = 10 * time.Second
	switch name {
	case "fence":
		return peers.StartFence(fenceBin, dir, 3, 17300, ttl)
	case "etcd":
		return peers.StartEtcd(self, dir, 17400, ttl)
	case "redis":
		return peers.StartRedis(dir, 17500, ttl, false)
	case "redis-fsync":
		return peers.StartRedis(dir, 17501, ttl, true)
	}
	return nil, fmt.Errorf("unknown system %q (fence, etcd, redis, redis-fsync)", name)
}

func run(ctx context.Context, systems []string, runs int, d time.Duration, only, out string) error {
	chosen := scenarios
	if only != "" {
		chosen = nil
		for _, s := range scenarios {
			if slices.Contains(strings.Split(only, ","), s.Name) {
				chosen = append(chosen, s)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "peerbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	fenceBin, err := peers.BuildFence(tmp)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	res := &Results{Machine: machine(host), Command: strings.Join(os.Args, " "), Started: time.Now(), Scenarios: chosen,
		Runs: map[string]map[string][]*bench.Result{}}
	for round := 1; round <= runs; round++ {
		for _, name := range systems {
			dir := filepath.Join(tmp, fmt.Sprintf("%s-%d", name, round))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			sys, err := start(name, dir, fenceBin, self)
			if err != nil {
				return err
			}
			for _, sc := range chosen {
				if ctx.Err() != nil {
					sys.Stop()
					return ctx.Err()
				}
				r, err := bench.Run(ctx, bench.Config{Target: sys, Workload: sc.Workload, Clients: sc.Clients, Duration: d,
					MaxOps: 1 << 40, TTL: 10 * time.Second, Window: 64})
				if errors.Is(err, bench.ErrUnsupported) {
					continue // e.g. renewals for Redis: not part of the comparison
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "round %d %s %s: %v\n", round, name, sc.Name, err)
					continue
				}
				fmt.Printf("round %d %-11s %-15s %10.0f %s/s\n", round, name, sc.Name, r.OpsPerSec, r.Unit)
				if res.Runs[name] == nil {
					res.Runs[name] = map[string][]*bench.Result{}
				}
				res.Runs[name][sc.Name] = append(res.Runs[name][sc.Name], r)
			}
			sys.Stop()
		}
	}
	report(os.Stdout, res, systems)
	if out != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		return os.WriteFile(out, b, 0o644)
	}
	return nil
}

func machine(host string) string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	cores := strings.Count(string(b), "processor\t:")
	return fmt.Sprintf("%s, %d cores", host, cores)
}

// median of a scenario's throughput and of its main latency percentiles.
func median(rs []*bench.Result, f func(*bench.Result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

func mainOp(r *bench.Result) bench.Latency {
	if l, ok := r.Latency["lock"]; ok {
		return l
	}
	return r.Latency["renew"]
}

func report(w *os.File, res *Results, systems []string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tsystem\truns\tops/s (median)\tvs etcd\tp50 ms\tp99 ms\tp99.9 ms\t")
	for _, sc := range res.Scenarios {
		etcd := median(res.Runs["etcd"][sc.Name], func(r *bench.Result) float64 { return r.OpsPerSec })
		for _, name := range systems {
			rs := res.Runs[name][sc.Name]
			if len(rs) == 0 {
				continue
			}
			ops := median(rs, func(r *bench.Result) float64 { return r.OpsPerSec })
			ratio := "-"
			if etcd > 0 {
				ratio = fmt.Sprintf("%.2f×", ops/etcd)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%.3f\t%.3f\t%.3f\t\n", sc.Name, name, len(rs), ops, ratio,
				median(rs, func(r *bench.Result) float64 { return mainOp(r).P50 }),
				median(rs, func(r *bench.Result) float64 { return mainOp(r).P99 }),
				median(rs, func(r *bench.Result) float64 { return mainOp(r).P999 }))
		}
	}
	tw.Flush()
}
