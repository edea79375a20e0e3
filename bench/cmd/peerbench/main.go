// Command peerbench runs fence and the systems it is compared with — a
// 3-member etcd cluster (embed, fsync on), Redis (SET NX PX; without and
// with appendfsync always) and, when asked for, a 3-server ZooKeeper
// ensemble (Debian's package, installed on first use; transaction log
// fsynced) — one after another on this machine, through
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
	// MaxOps ends the run early (0: only --duration); a scenario with
	// MaxOps runs on a freshly started system, up to 10 minutes, with
	// 1-hour leases, and the members' memory is read before and after.
	MaxOps int64 `json:"max_ops,omitempty"`
}

var scenarios = []scenario{
	{"uncontended-64", bench.Uncontended, 64, 0},
	{"contended-16", bench.Contended, 16, 0},
	{"renew-16x64", bench.RenewHeavy, 16, 0},
	{"latency-1", bench.Uncontended, 1, 0},
	{"latency-16", bench.Uncontended, 16, 0},
	{"mixed-32", bench.Mixed, 32, 0}, // 16 renewal streams while 16 clients lock and release
	{"leases-100k", bench.ManyLeases, 32, 100_000},
}

// Results are every run's measurements: system → scenario → one per
// round, and per system the failover times in seconds.
type Results struct {
	Machine   Machine                               `json:"machine"`
	Command   string                                `json:"command"`
	Started   time.Time                             `json:"started"`
	Scenarios []scenario                            `json:"scenarios"`
	Runs      map[string]map[string][]*bench.Result `json:"runs"`
	Failover  map[string][]float64                  `json:"failover_seconds,omitempty"`
	Memory    map[string][]Memory                   `json:"memory,omitempty"`
	// Curves are the points of --curve runs (see curve.go).
	Curves []CurvePoint `json:"curves,omitempty"`
}

// Memory is each member's resident memory (bytes) before and after a
// MaxOps scenario, in one round.
type Memory struct {
	Scenario string  `json:"scenario"`
	Before   []int64 `json:"before"`
	After    []int64 `json:"after"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "etcd-member" {
		etcdMember(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "loopback-echo" {
		loopbackEcho()
		return
	}
	systems := flag.String("systems", "fence,etcd,redis,redis-fsync", "systems to run, in order; also zookeeper (installed from Debian's package on first use) (fence@REV: fence built at git revision REV, e.g. to compare with an earlier fence in the same run; a +tls suffix serves TLS on every port, +signed signs every grant with a token key: fence+tls+signed; +relock: the lock-and-release loops hold the lock and take it again with one relock call (Lease.Relock), e.g. --systems fence,fence+relock)")
	runs := flag.Int("runs", 3, "rounds (each system fresh in each); medians are over these")
	duration := flag.Duration("duration", 10*time.Second, "length of each measurement")
	only := flag.String("scenarios", "", "comma-separated subset of: "+names())
	out := flag.String("out", "", "write every measurement as JSON here")
	kills := flag.Int("failovers", 10, "leader kills per clustered system (after the rounds; 0 skips)")
	profiles := flag.String("profiles", "", "save a CPU profile and a trace of fence's leader, and a CPU profile of the clients, per scenario (round 1) in this dir")
	var curves curveFlags
	flag.Var(&curves, "curve", "measure a curve instead of the scenarios and failovers: clients=1,4,16,… (uncontended lock+release at each client count) leases=10000,100000,… (uncontended with --curve-clients clients while that many leases are live) or renewals=1,4,16,… (renewal streams, 64 in flight each); repeat for several; each point lasts --duration")
	curveClientsN := flag.Int("curve-clients", 64, "clients locking and releasing at each point of a leases curve")
	fill := flag.Duration("curve-fill", 15*time.Minute, "at most this long to create one leases point's leases")
	flag.Parse()
	if *curveClientsN < 1 || *curveClientsN > maxCurveClients {
		fmt.Fprintf(os.Stderr, "peerbench: --curve-clients %d outside 1…%d\n", *curveClientsN, maxCurveClients)
		os.Exit(2)
	}
	if *fill <= 0 || *fill > time.Hour {
		fmt.Fprintf(os.Stderr, "peerbench: --curve-fill %v outside 0…1h\n", *fill)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o := options{systems: strings.Split(*systems, ","), runs: *runs, d: *duration, only: *only, out: *out,
		kills: *kills, profiles: *profiles, curves: curves, curveClients: *curveClientsN, fill: *fill}
	if err := run(ctx, o); err != nil {
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

// fenceRev is the revision a system name fence@REV asks for ("" for fence,
// the working tree), and how it serves: suffixes "+tls" (TLS on every
// port) and "+signed" (a token key: every grant signed), in any order, as
// in fence+tls+signed, and "+relock" (the cycle loops relock instead of
// releasing and locking: Lease.Relock); ok is false for the other systems.
func fenceRev(name string) (rev string, how peers.FenceOptions, ok bool) {
	for {
		var cut bool
		if name, cut = strings.CutSuffix(name, "+tls"); cut {
			how.TLS = true
		} else if name, cut = strings.CutSuffix(name, "+signed"); cut {
			how.Signed = true
		} else if name, cut = strings.CutSuffix(name, "+relock"); cut {
			how.Relock = true
		} else {
			break
		}
	}
	if name == "fence" {
		return "", how, true
	}
	rev, ok = strings.CutPrefix(name, "fence@")
	return rev, how, ok && rev != ""
}

// relocks reports whether system name's cycle loops relock (fence+relock)
// on workload.
func relocks(name, workload string) bool {
	_, how, ok := fenceRev(name)
	return ok && how.Relock && bench.Cycles(workload)
}

func start(name, dir string, fenceBins map[string]string, self string) (system, error) {
	const ttl = 10 * time.Second
	if rev, how, ok := fenceRev(name); ok {
		return peers.StartFence(fenceBins[rev], dir, 3, 17300, ttl, how)
	}
	switch name {
	case "etcd":
		return peers.StartEtcd(self, dir, 17400, ttl)
	case "redis":
		return peers.StartRedis(dir, 17500, ttl, false)
	case "redis-fsync":
		return peers.StartRedis(dir, 17501, ttl, true)
	case "zookeeper":
		return peers.StartZooKeeper(dir, 17600, ttl)
	}
	return nil, fmt.Errorf("unknown system %q (fence, fence@REV, with +tls, +signed and/or +relock, etcd, redis, redis-fsync, zookeeper)", name)
}

// options are the command line's choices.
type options struct {
	systems   []string
	runs      int
	d         time.Duration
	only, out string
	kills     int
	profiles  string
	// curves, when given, are run instead of the scenarios and failovers.
	curves       []curve
	curveClients int
	fill         time.Duration
}

func run(ctx context.Context, o options) error {
	systems := o.systems
	chosen := scenarios
	if only := o.only; only != "" {
		chosen = nil
		for _, s := range scenarios {
			if slices.Contains(strings.Split(only, ","), s.Name) {
				chosen = append(chosen, s)
			}
		}
	}
	if len(o.curves) > 0 {
		chosen = nil // the curves run instead
	}
	tmp, err := os.MkdirTemp("", "peerbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if slices.Contains(systems, "zookeeper") {
		if err := peers.InstallZooKeeper(os.Stderr); err != nil {
			return err
		}
	}
	fenceBins := map[string]string{}
	for _, name := range systems {
		if rev, _, ok := fenceRev(name); ok && fenceBins[rev] == "" {
			if fenceBins[rev], err = peers.BuildFence(tmp, rev); err != nil {
				return err
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	m, err := measureMachine(tmp, self)
	if err != nil {
		return fmt.Errorf("measure the machine: %w", err)
	}
	fmt.Println("machine:", m)
	if o.profiles != "" {
		if err := os.MkdirAll(o.profiles, 0o755); err != nil {
			return err
		}
	}
	b := &bencher{o: o, scenarios: chosen, tmp: tmp, fenceBins: fenceBins, self: self,
		res: &Results{Machine: m, Command: strings.Join(os.Args, " "), Started: time.Now(), Scenarios: chosen,
			Runs: map[string]map[string][]*bench.Result{}, Failover: map[string][]float64{}, Memory: map[string][]Memory{}}}
	res := b.res
	if len(o.curves) > 0 {
		fmt.Println(curvePlan(o.curves, systems, o.runs, o.d, o.fill))
		t0 := time.Now()
		err := b.curves(ctx) // on an interrupt, what was measured is still reported and saved
		reportCurves(os.Stdout, res, systems)
		fmt.Printf("the curves took %v\n", time.Since(t0).Round(time.Second))
		return errors.Join(err, b.write())
	}
	for round := 1; round <= o.runs; round++ {
		for _, name := range systems {
			if err := b.round(ctx, round, name); err != nil {
				return err
			}
		}
	}
	for _, name := range systems {
		if o.kills == 0 || ctx.Err() != nil {
			break
		}
		sys, err := b.startIn(name, name+"-failover")
		if err != nil {
			return err
		}
		secs, err := failover(ctx, name, sys, o.kills)
		sys.Stop()
		if errors.Is(err, bench.ErrUnsupported) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "failover %s: %v\n", name, err)
		}
		res.Failover[name] = secs
	}
	report(os.Stdout, res, systems)
	return b.write()
}

// write saves the results as JSON to --out, if given.
func (b *bencher) write() error {
	if b.o.out == "" {
		return nil
	}
	out, _ := json.MarshalIndent(b.res, "", "  ")
	return os.WriteFile(b.o.out, out, 0o644)
}

// bencher runs the chosen scenarios on the systems and collects results.
type bencher struct {
	o         options
	scenarios []scenario
	tmp, self string
	fenceBins map[string]string // by revision ("" for the working tree)
	res       *Results
}

// startIn starts system name with its data in a new dir under tmp.
func (b *bencher) startIn(name, dir string) (system, error) {
	dir = filepath.Join(b.tmp, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return start(name, dir, b.fenceBins, b.self)
}

// round measures every scenario on one freshly started system; a scenario
// with MaxOps gets a fresh system of its own, and the members' memory is
// read before and after it.
func (b *bencher) round(ctx context.Context, round int, name string) error {
	sys, err := b.startIn(name, fmt.Sprintf("%s-%d", name, round))
	if err != nil {
		return err
	}
	defer func() {
		if sys != nil {
			sys.Stop()
		}
	}()
	d := b.o.d
	for _, sc := range b.scenarios {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cfg := bench.Config{Target: sys, Workload: sc.Workload, Clients: sc.Clients, Duration: d,
			MaxOps: 1 << 40, TTL: 10 * time.Second, Window: 64, Relock: relocks(name, sc.Workload)}
		var mem *Memory
		if sc.MaxOps > 0 {
			if _, ok := sys.(bench.LeaseCreator); !ok && sc.Workload == bench.ManyLeases {
				continue
			}
			sys.Stop()
			if sys, err = b.startIn(name, fmt.Sprintf("%s-%d-%s", name, round, sc.Name)); err != nil {
				return err
			}
			cfg.Target, cfg.MaxOps, cfg.Duration, cfg.TTL = sys, sc.MaxOps, 10*time.Minute, time.Hour
			mem = &Memory{Scenario: sc.Name, Before: rss(sys)}
		}
		profiled := make(chan error, 1)
		if b.o.profiles != "" && round == 1 {
			go func() { profiled <- profileLeader(ctx, sys, name, sc.Name, b.o.profiles, d) }()
		} else {
			profiled <- nil
		}
		r, err := bench.Run(ctx, cfg)
		if mem != nil && err == nil {
			time.Sleep(2 * time.Second) // followers apply the tail
			mem.After = rss(sys)
			b.res.Memory[name] = append(b.res.Memory[name], *mem)
			fmt.Printf("round %d %-11s %-15s RSS per member before %v, after %v MiB\n", round, name, sc.Name, mib(mem.Before), mib(mem.After))
		}
		if perr := <-profiled; perr != nil {
			fmt.Fprintf(os.Stderr, "profile %s %s: %v\n", name, sc.Name, perr)
		}
		if errors.Is(err, bench.ErrUnsupported) {
			continue // e.g. renewals for Redis: not part of the comparison
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "round %d %s %s: %v\n", round, name, sc.Name, err)
			continue
		}
		fmt.Printf("round %d %-11s %-15s %10.0f %s/s\n", round, name, sc.Name, r.OpsPerSec, r.Unit)
		if b.res.Runs[name] == nil {
			b.res.Runs[name] = map[string][]*bench.Result{}
		}
		b.res.Runs[name][sc.Name] = append(b.res.Runs[name][sc.Name], r)
	}
	return nil
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
	return medianOf(v)
}

func mainOp(r *bench.Result) bench.Latency {
	for _, op := range []string{"relock", "lock", "renew", "create-lease"} { // a relocking run's main op is the relock
		if l, ok := r.Latency[op]; ok {
			return l
		}
	}
	return bench.Latency{}
}

func report(w *os.File, res *Results, systems []string) {
	fmt.Fprintln(w, "machine:", res.Machine)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	// Ratios are to etcd, and to ZooKeeper when it ran.
	refs := []string{"etcd"}
	if len(res.Runs["zookeeper"]) > 0 {
		refs = append(refs, "zookeeper")
	}
	fmt.Fprintf(tw, "scenario\tsystem\truns\tops/s (median)\t%s\tp50 ms\tp99 ms\tp99.9 ms\t\n", "vs "+strings.Join(refs, "\tvs "))
	for _, sc := range res.Scenarios {
		for _, name := range systems {
			rs := res.Runs[name][sc.Name]
			if len(rs) == 0 {
				continue
			}
			ops := median(rs, func(r *bench.Result) float64 { return r.OpsPerSec })
			var ratios []string
			for _, ref := range refs {
				ratio := "-"
				if base := median(res.Runs[ref][sc.Name], func(r *bench.Result) float64 { return r.OpsPerSec }); base > 0 {
					ratio = fmt.Sprintf("%.2f×", ops/base)
				}
				ratios = append(ratios, ratio)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%.3f\t%.3f\t%.3f\t\n", sc.Name, name, len(rs), ops, strings.Join(ratios, "\t"),
				median(rs, func(r *bench.Result) float64 { return mainOp(r).P50 }),
				median(rs, func(r *bench.Result) float64 { return mainOp(r).P99 }),
				median(rs, func(r *bench.Result) float64 { return mainOp(r).P999 }))
		}
	}
	tw.Flush()
	for _, sc := range res.Scenarios {
		if sc.Workload != bench.Mixed {
			continue
		}
		fmt.Fprintf(tw, "%s\tsystem\trenewals/s (median)\tgrants/s (median)\trenew p99 ms\tlock p99 ms\t\n", sc.Name)
		for _, name := range systems {
			rs := res.Runs[name][sc.Name]
			if len(rs) == 0 {
				continue
			}
			rate := func(op string) float64 {
				return median(rs, func(r *bench.Result) float64 { return float64(r.Latency[op].Count) / r.Seconds })
			}
			fmt.Fprintf(tw, "\t%s\t%.0f\t%.0f\t%.3f\t%.3f\t\n", name, rate("renew"), rate("lock"),
				median(rs, func(r *bench.Result) float64 { return r.Latency["renew"].P99 }),
				median(rs, func(r *bench.Result) float64 { return r.Latency["lock"].P99 }))
		}
	}
	tw.Flush()
	for _, sc := range res.Scenarios {
		if sc.MaxOps == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\tsystem\tlargest member RSS after, MiB (median)\tgrowth, MiB (median)\t\n", sc.Name)
		for _, name := range systems {
			var after, growth []float64
			for _, m := range res.Memory[name] {
				if m.Scenario == sc.Name {
					after = append(after, largest(m.After))
					growth = append(growth, largest(m.After)-largest(m.Before))
				}
			}
			if len(after) > 0 {
				fmt.Fprintf(tw, "\t%s\t%.0f\t%.0f\t\n", name, medianOf(after), medianOf(growth))
			}
		}
	}
	tw.Flush()
	if len(res.Failover) == 0 {
		return
	}
	fmt.Fprintln(tw, "failover\tsystem\tkills\tmedian s\tmax s\t")
	for _, name := range systems {
		if secs := res.Failover[name]; len(secs) > 0 {
			fmt.Fprintf(tw, "first grant after leader kill\t%s\t%d\t%.3f\t%.3f\t\n", name, len(secs), medianOf(secs), slices.Max(secs))
		}
	}
	tw.Flush()
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	sort.Float64s(v)
	return v[len(v)/2]
}
