package advise

import (
	"math"
	"strings"
	"testing"
	"time"
)

// near reports whether got is want to nine significant digits: the figures
// are float64 products of decimal inputs (0.4 s × 50).
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

// guide returns the inputs of the guide's example: "99 of 100 runs end
// within 20 seconds. The slowest 1 in 100 takes 90 seconds", a nightly job
// over 1,000 restaurants, 1,000 holders, a total that a stale holder would
// overwrite in a row that can check the token, and the guide's defaults
// (1 in 10,000 pauses, 0.4 s copy delay, 50 grants/s, a 10-minute lease
// to compare with).
func guide() Inputs {
	in := DefaultInputs()
	in.P99, in.MaxRun = 20*time.Second, 90*time.Second
	in.RunsPerDay, in.Holders = 1000, 1000
	in.TargetChecksToken = true
	return in
}

// TestGuideNumbers feeds Advise the guide's own assumptions and expects the
// guide's own numbers, typed in from its text.
func TestGuideNumbers(t *testing.T) {
	a := Advise(guide())
	// "I would use a 30-second lease, renewed every 10 seconds"
	if a.TTL != 30*time.Second || a.Renew != 10*time.Second {
		t.Errorf("TTL %v renew %v, want 30s and 10s", a.TTL, a.Renew)
	}
	// "With 1,000 holders there are 1,000 / 10 = 100 renewals per second."
	if !near(a.RenewalsPerSecond, 100) {
		t.Errorf("renewals/s %v, want 100", a.RenewalsPerSecond)
	}
	// "1% of 1,000 restaurants is 10 runs a night with a second holder."
	if !near(a.SlowRunShare, 0.01) || a.SlowRunShareAtLeast || !near(a.ExpiriesWithoutRenewal, 10) {
		t.Errorf("slow runs %v (at least: %v), expiries without renewal %v; want 0.01, 10", a.SlowRunShare, a.SlowRunShareAtLeast, a.ExpiriesWithoutRenewal)
	}
	// "A 30-second lease waits 30 seconds. A 10-minute lease waits 600
	// seconds, which is 20 times longer (600 / 30)."
	if a.CrashWait != 30*time.Second || a.CompareTTL.Seconds() != 600 || !near(a.CompareWaitRatio, 20) {
		t.Errorf("crash wait %v, compared %v, ratio %v; want 30s, 600 s, 20", a.CrashWait, a.CompareTTL, a.CompareWaitRatio)
	}
	// "At the moment of a crash, 50 x 0.4 = 20 grants may not be copied."
	if !near(a.GrantsAtRisk, 20) {
		t.Errorf("grants at risk %v, want 20", a.GrantsAtRisk)
	}
	if a.Level != LeaseAndToken {
		t.Errorf("level %q, want %q", a.Level, LeaseAndToken)
	}
	if !hasText(a.Warnings, "asynchronous follower") || !hasText(a.Warnings, " 20 grants may not be copied") {
		t.Errorf("no warning about counters on asynchronous followers with 20 grants: %q", a.Warnings)
	}

	// "1 run in 10,000 freezes for longer than the lease, and there are
	// 5,000,000 runs a day. That is 5,000,000 / 10,000 = 500 runs a day
	// [...] so up to 500 bad writes a day are stopped."
	in := guide()
	in.RunsPerDay = 5_000_000
	a = Advise(in)
	if !near(a.OverlapsPerDay, 500) || !near(a.StaleWritesStopped, 500) || !near(a.BadWritesWithoutToken, 500) || a.BadWritesWithToken != 0 {
		t.Errorf("overlaps %v, stopped %v, bad writes without %v with %v; want 500, 500, 500, 0",
			a.OverlapsPerDay, a.StaleWritesStopped, a.BadWritesWithoutToken, a.BadWritesWithToken)
	}
}

func hasText(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		name       string
		edit       func(*Inputs)
		want       Level
		reason     string // a phrase one of the reasons must contain
		badWithout float64
	}{
		{"damage, target checks", func(*Inputs) {}, LeaseAndToken, "check it and write in one step", 0.1},
		{"damage, target cannot check", func(in *Inputs) { in.TargetChecksToken = false }, LeaseAndToken, "fencing.Ledger.Once", 0.1},
		{"waste only", func(in *Inputs) { in.DoubleRunOnlyWastesWork = true }, Lease, "only wastes work", 0},
		{"one database, short", func(in *Inputs) {
			in.OneDatabase, in.P99, in.MaxRun = true, 50*time.Millisecond, 300*time.Millisecond
		}, PlainLock, "inside one database", 0.1},
		{"one database, short, waste only", func(in *Inputs) {
			in.OneDatabase, in.DoubleRunOnlyWastesWork, in.P99, in.MaxRun = true, true, 50*time.Millisecond, 200*time.Millisecond
		}, PlainLock, "critical part is short", 0},
		{"one database, too long for a plain lock", func(in *Inputs) {
			in.OneDatabase, in.P99, in.MaxRun = true, 50*time.Millisecond, 301*time.Millisecond
		}, LeaseAndToken, "longer than a plain lock should be held", 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := guide()
			tc.edit(&in)
			a := Advise(in)
			if a.Level != tc.want || !hasText(a.Reasons, tc.reason) {
				t.Errorf("level %q reasons %q; want %q with %q", a.Level, a.Reasons, tc.want, tc.reason)
			}
			// 1,000 runs × 1/10,000 pauses = 0.1 overlaps a day.
			if !near(a.BadWritesWithoutToken, tc.badWithout) || a.BadWritesWithToken != 0 {
				t.Errorf("bad writes without a token %v with %v; want %v, 0", a.BadWritesWithoutToken, a.BadWritesWithToken, tc.badWithout)
			}
		})
	}
}

func TestSlowRunShare(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		share   float64
		atLeast bool
		expiry  float64 // of 1,000 runs
	}{
		{"TTL covers the slowest run", 90 * time.Second, 0, false, 0},
		{"TTL between p99 and max", 20 * time.Second, 0.01, false, 10},
		{"TTL below the p99", 19 * time.Second, 0.01, true, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := guide()
			in.TTL = tc.ttl
			a := Advise(in)
			if a.TTL != tc.ttl || a.TTLNote != "as given" {
				t.Errorf("TTL %v (%s), want %v as given", a.TTL, a.TTLNote, tc.ttl)
			}
			if !near(a.SlowRunShare, tc.share) || a.SlowRunShareAtLeast != tc.atLeast || !near(a.ExpiriesWithoutRenewal, tc.expiry) {
				t.Errorf("share %v at least %v expiries %v; want %v %v %v", a.SlowRunShare, a.SlowRunShareAtLeast, a.ExpiriesWithoutRenewal, tc.share, tc.atLeast, tc.expiry)
			}
			if got := hasText(a.Warnings, "below the p99"); got != tc.atLeast {
				t.Errorf("warning about a TTL below the p99: %v, want %v", got, tc.atLeast)
			}
		})
	}
}

func TestChooseTTL(t *testing.T) {
	for _, tc := range []struct{ p99, want time.Duration }{
		{20 * time.Second, 30 * time.Second}, // the guide's pair
		{21 * time.Second, 32 * time.Second}, // 31.5 s, rounded up
		{2 * time.Second, 3 * time.Second},
		{100 * time.Millisecond, time.Second}, // the server's minimum
		{50 * time.Minute, time.Hour},         // 75 min, held at the maximum
	} {
		if got := ChooseTTL(tc.p99); got != tc.want {
			t.Errorf("ChooseTTL(%v) = %v, want %v", tc.p99, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Inputs)
		want string
	}{
		{"p99 zero", func(in *Inputs) { in.P99 = 0 }, "p99 run time 0s: must be positive"},
		{"max negative", func(in *Inputs) { in.MaxRun = -time.Second }, "max run time -1s: must be positive"},
		{"p99 above max", func(in *Inputs) { in.P99 = 91 * time.Second }, "p99 run time 1m31s is above the max run time 1m30s"},
		{"pause rate above 1", func(in *Inputs) { in.PauseRate = 1.5 }, "pause rate 1.5"},
		{"pause rate NaN", func(in *Inputs) { in.PauseRate = math.NaN() }, "pause rate NaN"},
		{"no runs", func(in *Inputs) { in.RunsPerDay = 0 }, "runs per day 0"},
		{"no holders", func(in *Inputs) { in.Holders = -3 }, "holders -3"},
		{"negative copy delay", func(in *Inputs) { in.CopyDelay = -time.Millisecond }, "copy delay -1ms"},
		{"negative grant rate", func(in *Inputs) { in.GrantRate = -1 }, "grant rate -1"},
		{"infinite grant rate", func(in *Inputs) { in.GrantRate = math.Inf(1) }, "grant rate +Inf"},
		{"negative TTL", func(in *Inputs) { in.TTL = -time.Second }, "TTL -1s"},
		{"a TTL no lease can have", func(in *Inputs) { in.TTL = 2 * time.Nanosecond }, "TTL 2ns: must be at least 1ms"},
		{"no lease to compare", func(in *Inputs) { in.CompareTTL = 0 }, "lease to compare"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := guide()
			tc.edit(&in)
			err := in.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
			defer func() {
				if recover() == nil {
					t.Error("Advise accepted invalid inputs")
				}
			}()
			Advise(in)
		})
	}
	if err := guide().Validate(); err != nil {
		t.Fatalf("the guide's inputs: %v", err)
	}
	// Every problem is listed, not only the first.
	if err := (Inputs{}).Validate(); err == nil || strings.Count(err.Error(), "\n") < 4 {
		t.Fatalf("zero Inputs: %v", err)
	}
}

func TestFormatCount(t *testing.T) {
	for x, want := range map[float64]string{500: "500", 0.4 * 50: "20", 0.1: "0.1", 1.0 / 3: "0.3333", 5e6: "5000000"} {
		if got := FormatCount(x); got != want {
			t.Errorf("FormatCount(%v) = %q, want %q", x, got, want)
		}
	}
}
