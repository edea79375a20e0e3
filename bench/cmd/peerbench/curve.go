package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencehq/fence/internal/bench"
)

// Curves: how cost grows. A curve measures a load at each of its x
// values, on one freshly started system per curve and round:
//
//   - clients: the uncontended lock+release cycle (each client on its own
//     lock) with x clients;
//   - leases: the same cycle with --curve-clients clients while x leases
//     are live: the leases are created first (the many-leases load, 1-hour
//     TTL, kept for the rest of the curve), cumulatively — the 100k point
//     adds 90,000 to the 10k point's 10,000;
//   - renewals: renewals (the renew-16x64 load) on x streams, each with
//     64 in flight.
const (
	curveClients  = "clients"
	curveLeases   = "leases"
	curveRenewals = "renewals"
)

// curveKinds are the curves, in report order.
var curveKinds = []string{curveClients, curveLeases, curveRenewals}

// Limits of a curve's x values.
const (
	maxCurveClients = 10000     // bench.Config's limit
	maxCurveLeases  = 5_000_000 // ~10 minutes of etcd's creation rate, per 1M
	fillClients     = 32        // clients creating leases (as leases-100k)
)

// curve is one --curve flag: its kind and its x values, increasing.
type curve struct {
	Kind string
	Xs   []int64
}

// parseCurve reads "clients=1,4,16" or "leases=10000,100000".
func parseCurve(s string) (curve, error) {
	kind, list, ok := strings.Cut(s, "=")
	if !ok {
		return curve{}, fmt.Errorf("curve %q: want clients=N,N,…, leases=N,N,… or renewals=N,N,…", s)
	}
	var limit int64
	switch kind {
	case curveClients, curveRenewals:
		limit = maxCurveClients
	case curveLeases:
		limit = maxCurveLeases
	default:
		return curve{}, fmt.Errorf("curve %q: unknown curve %q (clients, leases or renewals)", s, kind)
	}
	c := curve{Kind: kind}
	for _, f := range strings.Split(list, ",") {
		x, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return curve{}, fmt.Errorf("curve %q: %q is not a whole number", s, f)
		}
		if x < 1 || x > limit {
			return curve{}, fmt.Errorf("curve %q: %d outside 1…%d", s, x, limit)
		}
		if n := len(c.Xs); n > 0 && x <= c.Xs[n-1] {
			return curve{}, fmt.Errorf("curve %q: values must increase (%d after %d)", s, x, c.Xs[n-1])
		}
		c.Xs = append(c.Xs, x)
	}
	return c, nil
}

// curveFlags is the repeatable --curve flag.
type curveFlags []curve

func (c *curveFlags) String() string {
	var s []string
	for _, cv := range *c {
		var xs []string
		for _, x := range cv.Xs {
			xs = append(xs, strconv.FormatInt(x, 10))
		}
		s = append(s, cv.Kind+"="+strings.Join(xs, ","))
	}
	return strings.Join(s, " ")
}

func (c *curveFlags) Set(s string) error {
	cv, err := parseCurve(s)
	if err != nil {
		return err
	}
	for _, have := range *c {
		if have.Kind == cv.Kind {
			return fmt.Errorf("curve %q: %s given twice", s, cv.Kind)
		}
	}
	*c = append(*c, cv)
	return nil
}

// CurvePoint is one measured point of a curve: the load at X (clients,
// live leases or renewal streams), in one round.
type CurvePoint struct {
	Curve  string `json:"curve"` // clients, leases or renewals
	System string `json:"system"`
	Round  int    `json:"round"`
	X      int64  `json:"x"`
	// Clients locking and releasing, or renewal streams (X but for the
	// leases curve).
	Clients   int     `json:"clients"`
	Unit      string  `json:"unit"`        // what one op is: "lock+release cycle" or "renewal"
	OpsPerSec float64 `json:"ops_per_sec"` // ops per second
	P50       float64 `json:"p50_ms"`      // of Lock, or of a renewal
	P99       float64 `json:"p99_ms"`      // of Lock, or of a renewal
	Errors    int64   `json:"errors"`
	// Leases curve: the leases live during the measurement (below X only
	// when creating them ran out of --curve-fill time), how long creating
	// this point's share took, and each member's RSS after.
	Leases      int64   `json:"leases,omitempty"`
	FillSeconds float64 `json:"fill_seconds,omitempty"`
	RSS         []int64 `json:"rss_bytes,omitempty"`
}

// createsLeases reports whether sys can create bare leases: fence's and
// etcd's leases, ZooKeeper's sessions.
func createsLeases(sys system) bool {
	_, ok := sys.(bench.LeaseCreator)
	return ok
}

// leaseCapper is a system that holds only so many live leases in a
// curve (ZooKeeper: peers.ZKMaxLeases sessions).
type leaseCapper interface {
	MaxLeases() int64
}

// underCap splits a curve's x values (increasing) into those at or
// below limit and those above it.
func underCap(xs []int64, limit int64) (run, skipped []int64) {
	i, _ := slices.BinarySearch(xs, limit+1)
	return xs[:i], xs[i:]
}

// curvePlan is the run length of the curves, printed before they start:
// the measurements take exactly points × duration per system and round;
// creating leases takes at most fill per leases point.
func curvePlan(cs []curve, systems []string, runs int, d, fill time.Duration) string {
	var measure, fills time.Duration
	for _, c := range cs {
		measure += time.Duration(len(c.Xs)) * d
		if c.Kind == curveLeases {
			fills += time.Duration(len(c.Xs)) * fill
		}
	}
	n := time.Duration(len(systems) * runs)
	s := fmt.Sprintf("curves: %d system(s) × %d round(s): measuring %v", len(systems), runs, n*measure)
	if fills > 0 {
		s += fmt.Sprintf(", creating leases at most %v more", n*fills)
	}
	return s + ", plus starting each system once per curve and round"
}

// curves runs every curve on every system, round by round.
func (b *bencher) curves(ctx context.Context) error {
	for round := 1; round <= b.o.runs; round++ {
		for _, name := range b.o.systems {
			for _, c := range b.o.curves {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err := b.curve(ctx, round, name, c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// curve measures one curve on a freshly started system.
func (b *bencher) curve(ctx context.Context, round int, name string, c curve) error {
	sys, err := b.startIn(name, fmt.Sprintf("%s-%d-%s", name, round, c.Kind))
	if err != nil {
		return err
	}
	defer sys.Stop()
	if c.Kind == curveLeases && !createsLeases(sys) {
		fmt.Printf("round %d %-11s leases curve not run: no lease creation for %s\n", round, name, name)
		return nil
	}
	xs := c.Xs
	if capper, ok := sys.(leaseCapper); ok && c.Kind == curveLeases {
		var skipped []int64
		xs, skipped = underCap(c.Xs, capper.MaxLeases())
		if len(skipped) > 0 {
			fmt.Printf("round %d %-11s leases %v not run: above the %d live leases peerbench holds for %s\n", round, name, skipped, capper.MaxLeases(), name)
		}
	}
	var live int64
	for _, x := range xs {
		p := CurvePoint{Curve: c.Kind, System: name, Round: round, X: x, Clients: int(x)}
		if c.Kind == curveLeases {
			p.Clients = b.o.curveClients
			t0 := time.Now()
			r, err := bench.Run(ctx, bench.Config{Target: sys, Workload: bench.ManyLeases, Clients: fillClients,
				Duration: b.o.fill, MaxOps: x - live, TTL: time.Hour, Window: 64})
			if err != nil { // the rest of this curve would measure fewer leases than it says
				fmt.Fprintf(os.Stderr, "round %d %s: creating leases for %d: %v; the rest of the curve is not run\n", round, name, x, err)
				return nil
			}
			live += r.Ops
			p.Leases, p.FillSeconds = live, time.Since(t0).Seconds()
			if live < x {
				fmt.Fprintf(os.Stderr, "round %d %s: only %d of %d leases created in %v\n", round, name, live, x, b.o.fill)
			}
			time.Sleep(2 * time.Second) // followers apply the tail
			p.RSS = rss(sys)
		}
		workload := bench.Uncontended
		if c.Kind == curveRenewals {
			workload = bench.RenewHeavy
		}
		r, err := bench.Run(ctx, bench.Config{Target: sys, Workload: workload, Clients: p.Clients,
			Duration: b.o.d, MaxOps: 1 << 40, TTL: 10 * time.Second, Window: 64, Relock: relocks(name, workload)})
		if errors.Is(err, bench.ErrUnsupported) {
			fmt.Printf("round %d %-11s %s curve not run: %v\n", round, name, c.Kind, err)
			return nil
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "round %d %s %s=%d: %v\n", round, name, c.Kind, x, err)
			continue
		}
		op := mainOp(r)
		p.Unit, p.OpsPerSec, p.P50, p.P99, p.Errors = r.Unit, r.OpsPerSec, op.P50, op.P99, r.Errors
		fmt.Printf("round %d %-11s %s=%-8d %10.0f %s/s  p50 %.3f ms  p99 %.3f ms%s\n", round, name, c.Kind, x,
			p.OpsPerSec, r.Unit, p.P50, p.P99, leaseNote(p))
		b.res.Curves = append(b.res.Curves, p)
	}
	return nil
}

func leaseNote(p CurvePoint) string {
	if p.Curve != curveLeases {
		return ""
	}
	return fmt.Sprintf("  (%d live leases, created in %.1f s; RSS %v MiB)", p.Leases, p.FillSeconds, mib(p.RSS))
}

// reportCurves prints each curve's medians over the rounds, with the
// ratios to etcd (and to ZooKeeper when it ran), and the machine's floor measured in the same run.
func reportCurves(w *os.File, res *Results, systems []string) {
	m := res.Machine
	fmt.Fprintf(w, "machine: %s\nfloor (fdatasync + loopback round trip): %.0f µs\n", m, m.FdatasyncUs+m.LoopbackRTTus)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	refs := []string{"etcd"}
	if slices.ContainsFunc(res.Curves, func(p CurvePoint) bool { return p.System == "zookeeper" }) {
		refs = append(refs, "zookeeper")
	}
	// ops: lock+release cycles (the clients and leases curves) or renewals;
	// p50 and p99 of the Lock call or of a renewal.
	fmt.Fprintf(tw, "curve\tx\tsystem\truns\tops/s (median)\tvs %s\tp50 ms\tp99 ms\t\n", strings.Join(refs, "\tvs "))
	for _, c := range curveKinds {
		for _, x := range curveXs(res.Curves, c) {
			for _, name := range systems {
				ps := curvePoints(res.Curves, c, name, x)
				if len(ps) == 0 {
					continue
				}
				ops := medianPoint(ps, func(p CurvePoint) float64 { return p.OpsPerSec })
				var ratios []string
				for _, ref := range refs {
					ratio := "-"
					if base := medianPoint(curvePoints(res.Curves, c, ref, x), func(p CurvePoint) float64 { return p.OpsPerSec }); base > 0 {
						ratio = fmt.Sprintf("%.2f×", ops/base)
					}
					ratios = append(ratios, ratio)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.0f\t%s\t%.3f\t%.3f\t\n", c, x, name, len(ps), ops, strings.Join(ratios, "\t"),
					medianPoint(ps, func(p CurvePoint) float64 { return p.P50 }),
					medianPoint(ps, func(p CurvePoint) float64 { return p.P99 }))
			}
		}
	}
	tw.Flush()
}

// curveXs are the x values measured on curve c, increasing.
func curveXs(ps []CurvePoint, c string) []int64 {
	var xs []int64
	for _, p := range ps {
		if p.Curve == c && !slices.Contains(xs, p.X) {
			xs = append(xs, p.X)
		}
	}
	slices.Sort(xs)
	return xs
}

// curvePoints are system's points at x on curve c, one per round.
func curvePoints(ps []CurvePoint, c, system string, x int64) []CurvePoint {
	var out []CurvePoint
	for _, p := range ps {
		if p.Curve == c && p.System == system && p.X == x {
			out = append(out, p)
		}
	}
	return out
}

// medianPoint is the median of f over ps (0 for none).
func medianPoint(ps []CurvePoint, f func(CurvePoint) float64) float64 {
	if len(ps) == 0 {
		return 0
	}
	v := make([]float64, len(ps))
	for i, p := range ps {
		v[i] = f(p)
	}
	return medianOf(v)
}
