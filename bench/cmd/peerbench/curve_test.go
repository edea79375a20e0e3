package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCurve(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind string
		xs   []int64
	}{
		{"clients=1,4,16,64,256,1024", curveClients, []int64{1, 4, 16, 64, 256, 1024}},
		{"leases=10000, 100000,1000000", curveLeases, []int64{10000, 100000, 1000000}},
		{"clients=7", curveClients, []int64{7}},
		{"renewals=1,16,64", curveRenewals, []int64{1, 16, 64}},
	} {
		c, err := parseCurve(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if c.Kind != tc.kind || !slices.Equal(c.Xs, tc.xs) {
			t.Errorf("%q: got %s %v, want %s %v", tc.in, c.Kind, c.Xs, tc.kind, tc.xs)
		}
	}
}

func TestParseCurveRejects(t *testing.T) {
	for in, want := range map[string]string{
		"clients":              "want clients=N",
		"":                     "want clients=N",
		"latency=1,2":          `unknown curve "latency"`,
		"clients=":             `"" is not a whole number`,
		"clients=1,,4":         `"" is not a whole number`,
		"clients=1,x":          `"x" is not a whole number`,
		"clients=1.5":          `"1.5" is not a whole number`,
		"clients=0,4":          "0 outside 1…10000",
		"clients=1,20000":      "20000 outside 1…10000",
		"leases=-5":            "-5 outside 1…5000000",
		"leases=10000000":      "10000000 outside 1…5000000",
		"clients=4,1":          "values must increase (1 after 4)",
		"leases=10000,10000":   "values must increase (10000 after 10000)",
		"renewals=20000":       "20000 outside 1…10000",
		"clients=1,4 ,16, 64x": `" 64x" is not a whole number`,
	} {
		_, err := parseCurve(in)
		if err == nil {
			t.Errorf("%q: accepted", in)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q, want it to say %q", in, err, want)
		}
	}
}

// The --curve flag takes each curve once, and a bad value leaves the
// curves given before it as they were.
func TestCurveFlag(t *testing.T) {
	var cs curveFlags
	fs := flag.NewFlagSet("peerbench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&cs, "curve", "")
	if err := fs.Parse([]string{"--curve", "clients=1,16", "--curve", "leases=10000"}); err != nil {
		t.Fatal(err)
	}
	if got := cs.String(); got != "clients=1,16 leases=10000" {
		t.Fatalf("curves %q", got)
	}
	for _, bad := range []string{"clients=64", "leases=x"} {
		if err := cs.Set(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got := cs.String(); got != "clients=1,16 leases=10000" {
		t.Errorf("after bad values: curves %q", got)
	}
}

func TestCurvePlan(t *testing.T) {
	cs := []curve{{curveClients, []int64{1, 16, 64}}, {curveLeases, []int64{10000, 100000}}}
	got := curvePlan(cs, []string{"fence", "etcd"}, 3, 10*time.Second, 5*time.Minute)
	// 2 systems × 3 rounds × 5 points × 10 s; 6 × 2 fills × 5 min.
	for _, want := range []string{"2 system(s) × 3 round(s)", "measuring 5m0s", "creating leases at most 1h0m0s more"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan %q does not say %q", got, want)
		}
	}
	if got := curvePlan(cs[:1], []string{"fence"}, 1, 3*time.Second, time.Minute); strings.Contains(got, "creating") {
		t.Errorf("clients-only plan %q mentions creating leases", got)
	}
}

func TestReportCurvesMedians(t *testing.T) {
	ps := []CurvePoint{
		{Curve: curveClients, System: "fence", Round: 1, X: 16, OpsPerSec: 300},
		{Curve: curveClients, System: "fence", Round: 2, X: 16, OpsPerSec: 100},
		{Curve: curveClients, System: "fence", Round: 3, X: 16, OpsPerSec: 200},
		{Curve: curveClients, System: "etcd", Round: 1, X: 16, OpsPerSec: 50},
		{Curve: curveClients, System: "fence", Round: 1, X: 1, OpsPerSec: 10},
		{Curve: curveLeases, System: "fence", Round: 1, X: 10000, OpsPerSec: 99},
	}
	if xs := curveXs(ps, curveClients); !slices.Equal(xs, []int64{1, 16}) {
		t.Errorf("x values %v", xs)
	}
	got := medianPoint(curvePoints(ps, curveClients, "fence", 16), func(p CurvePoint) float64 { return p.OpsPerSec })
	if got != 200 {
		t.Errorf("median %v, want 200", got)
	}
	if n := len(curvePoints(ps, curveLeases, "etcd", 10000)); n != 0 {
		t.Errorf("%d etcd lease points", n)
	}
}

func TestUnderCap(t *testing.T) {
	xs := []int64{10000, 100000, 1000000}
	for _, tc := range []struct {
		limit        int64
		run, skipped []int64
	}{
		{10000, []int64{10000}, []int64{100000, 1000000}},
		{9999, nil, xs},
		{5_000_000, xs, nil},
		{100000, []int64{10000, 100000}, []int64{1000000}},
	} {
		run, skipped := underCap(xs, tc.limit)
		if !slices.Equal(run, tc.run) || !slices.Equal(skipped, tc.skipped) {
			t.Errorf("cap %d: run %v skipped %v, want %v %v", tc.limit, run, skipped, tc.run, tc.skipped)
		}
	}
}
