package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
)

// A --curve run's JSON, as peerbench writes it (the fields plot reads).
const curveJSON = `{
  "machine": {"host": "vm", "cores": 2, "loopback_rtt_p50_us": 10, "fdatasync_p50_us": 190},
  "curves": [
    {"curve": "clients", "system": "fence", "round": 1, "x": 16, "clients": 16, "ops_per_sec": 300, "p99_ms": 9},
    {"curve": "clients", "system": "fence", "round": 2, "x": 16, "clients": 16, "ops_per_sec": 100, "p99_ms": 30},
    {"curve": "clients", "system": "fence", "round": 3, "x": 16, "clients": 16, "ops_per_sec": 200, "p99_ms": 20},
    {"curve": "clients", "system": "fence", "round": 1, "x": 1, "clients": 1, "ops_per_sec": 40, "p99_ms": 2},
    {"curve": "clients", "system": "etcd", "round": 1, "x": 1024, "clients": 1024, "ops_per_sec": 900, "p99_ms": 400},
    {"curve": "clients", "system": "etcd", "round": 1, "x": 1, "clients": 1, "ops_per_sec": 20, "p99_ms": 4},
    {"curve": "leases", "system": "fence", "round": 1, "x": 10000, "clients": 64, "leases": 10000, "ops_per_sec": 5000, "p99_ms": 30},
    {"curve": "renewals", "system": "etcd", "round": 1, "x": 16, "clients": 16, "ops_per_sec": 90000, "p99_ms": 100}
  ]
}`

func load(t *testing.T) []curvePoint {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "r.json")
	if err := os.WriteFile(in, []byte(curveJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := readCurves(in)
	if err != nil {
		t.Fatal(err)
	}
	return res.Curves
}

func TestSeries(t *testing.T) {
	ps := load(t)
	ls, err := series(ps, "clients", "throughput")
	if err != nil {
		t.Fatal(err)
	}
	// Systems in name order; x increasing; medians over the rounds.
	want := []line{
		{"etcd", plotter.XYs{{X: 1, Y: 20}, {X: 1024, Y: 900}}},
		{"fence", plotter.XYs{{X: 1, Y: 40}, {X: 16, Y: 200}}},
	}
	if len(ls) != len(want) {
		t.Fatalf("lines %+v, want %+v", ls, want)
	}
	for i := range want {
		if ls[i].System != want[i].System || len(ls[i].XYs) != len(want[i].XYs) {
			t.Fatalf("line %d: %+v, want %+v", i, ls[i], want[i])
		}
		for j := range want[i].XYs {
			if ls[i].XYs[j] != want[i].XYs[j] {
				t.Errorf("%s point %d: %v, want %v", ls[i].System, j, ls[i].XYs[j], want[i].XYs[j])
			}
		}
	}
	p99, _ := series(ps, "clients", "p99")
	if got := p99[1].XYs[1].Y; got != 20 {
		t.Errorf("fence p99 at 16 clients %v, want the median 20", got)
	}
	leases, _ := series(ps, "leases", "throughput")
	if len(leases) != 1 || leases[0].System != "fence" || leases[0].XYs[0] != (plotter.XY{X: 10000, Y: 5000}) {
		t.Errorf("leases series %+v", leases)
	}
	if _, err := series(ps, "clients", "p50"); err == nil {
		t.Error("unknown metric accepted")
	}
}

func TestShortNumber(t *testing.T) {
	for x, want := range map[float64]string{1: "1", 1024: "1024", 10000: "10k", 100000: "100k", 1e6: "1M", 2500000: "2500k", 12345: "12345"} {
		if got := shortNumber(x); got != want {
			t.Errorf("%v: %q, want %q", x, got, want)
		}
	}
}

func TestRunCurvesWritesPlots(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "r.json")
	if err := os.WriteFile(in, []byte(curveJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(dir, "curves")
	if err := runCurves(in, prefix); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"clients-throughput", "clients-p99", "leases-throughput", "leases-p99", "renewals-throughput", "renewals-p99"} {
		if st, err := os.Stat(prefix + "-" + f + ".png"); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestRunCurvesRejects(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"scenarios.json": `{"machine": {"host": "vm"}, "runs": {}}`,
		"broken.json":    `{"curves": [`,
		"other.json":     `{"curves": [{"curve": "latency", "system": "fence", "x": 1}]}`,
	} {
		in := filepath.Join(dir, name)
		if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		err := runCurves(in, filepath.Join(dir, "out"))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming the file", name, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "out*")); len(m) != 0 {
		t.Errorf("files written for bad input: %v", m)
	}
}

func TestPlainLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (plainLogTicks{}).Ticks(0.015, 24000) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0.02 0.05 0.1 0.2 0.5 1 2 5 10 20 50 100 200 500 1000 2000 5000 10000 20000" {
		t.Errorf("labels %q", got)
	}
}
