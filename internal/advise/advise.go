package advise

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Level is one of the guide's three levels of safety.
type Level string

// The guide's three levels, weakest first.
const (
	// PlainLock: a row or advisory lock in the one database that holds all
	// the work; the database releases it when the transaction or session
	// ends.
	PlainLock Level = "plain lock"
	// Lease: a lock with a time limit, renewed while the holder works; a
	// double run is possible (a paused holder) and must only waste work.
	Lease Level = "lease"
	// LeaseAndToken: a lease whose every grant carries a fencing token that
	// the storage checks, refusing a stale holder's write.
	LeaseAndToken Level = "lease + fencing token"
)

// Defaults from the guide's assumptions, for the inputs a team rarely
// knows.
const (
	// DefaultPauseRate: "1 run in 10,000 freezes for longer than the lease".
	DefaultPauseRate = 1.0 / 10000
	// DefaultCopyDelay: "the lock server copies to a follower with a delay
	// of 0.4 seconds".
	DefaultCopyDelay = 400 * time.Millisecond
	// DefaultGrantRate: "it grants 50 locks per second".
	DefaultGrantRate = 50.0
	// DefaultCompareTTL: the guide's long lease, "A 10-minute lease waits
	// 600 seconds".
	DefaultCompareTTL = 10 * time.Minute
)

// Rules of thumb the guide states in words.
const (
	// PlainLockMaxRun is the guide's "short critical part": "under a few
	// hundred milliseconds". Longer work inside one database still gets a
	// lease.
	PlainLockMaxRun = 300 * time.Millisecond
	// RenewDivisor: "renew every lease / 3" (the guide's own advice).
	RenewDivisor = 3
	// tailOneIn: the p99 leaves 1 run in 100 slower ("99 of 100 runs end
	// within 20 seconds. The slowest 1 in 100 takes 90 seconds").
	tailOneIn = 100
	// MinTTL and MaxTTL are the server's default TTL bounds (fence serve
	// --min-ttl, --max-ttl); a chosen TTL is kept inside them.
	MinTTL = time.Second
	MaxTTL = time.Hour
)

// Inputs are what a team knows about its job. Durations are spans, counts
// are per day or per second as named. The zero value is not valid: see
// [Inputs.Validate]; [DefaultInputs] fills in the guide's assumptions.
type Inputs struct {
	// P99 is the run time 99 of 100 runs end within.
	P99 time.Duration
	// MaxRun is the slowest run's time (the slowest 1 in 100).
	MaxRun time.Duration
	// PauseRate is the share of runs whose holder freezes (GC, VM
	// migration, SIGSTOP) for longer than its lease, 0…1.
	PauseRate float64
	// RunsPerDay is how many times a day the lock is taken.
	RunsPerDay int
	// Holders is how many holders keep a lease at once (each renews).
	Holders int
	// OneDatabase: all the work happens inside one database.
	OneDatabase bool
	// TargetChecksToken: the thing written to can check a token (a row you
	// own, your own API), unlike an SMS or payment provider.
	TargetChecksToken bool
	// DoubleRunOnlyWastesWork: two holders at once waste work but damage
	// nothing.
	DoubleRunOnlyWastesWork bool
	// CopyDelay is how far a lock server's follower lags its leader.
	CopyDelay time.Duration
	// GrantRate is the lock server's grants per second.
	GrantRate float64
	// TTL, if not zero, is the lease TTL to judge instead of the one chosen
	// from P99.
	TTL time.Duration
	// CompareTTL is the long lease the crash wait is compared with.
	CompareTTL time.Duration
}

// DefaultInputs returns Inputs with the guide's assumptions filled in; the
// job's own figures (P99, MaxRun, RunsPerDay, Holders) are left zero.
func DefaultInputs() Inputs {
	return Inputs{PauseRate: DefaultPauseRate, CopyDelay: DefaultCopyDelay, GrantRate: DefaultGrantRate, CompareTTL: DefaultCompareTTL}
}

// Validate returns every problem with in, or nil. Advise needs it nil.
func (in Inputs) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if in.P99 <= 0 {
		bad("p99 run time %v: must be positive", in.P99)
	}
	if in.MaxRun <= 0 {
		bad("max run time %v: must be positive", in.MaxRun)
	}
	if in.P99 > 0 && in.MaxRun > 0 && in.P99 > in.MaxRun {
		bad("p99 run time %v is above the max run time %v: the slowest run cannot be faster than the 99th percentile", in.P99, in.MaxRun)
	}
	if !(in.PauseRate >= 0 && in.PauseRate <= 1) { // also refuses NaN
		bad("pause rate %v: must be a share of runs, 0…1 (e.g. 1/10000)", in.PauseRate)
	}
	if in.RunsPerDay <= 0 {
		bad("runs per day %d: must be at least 1", in.RunsPerDay)
	}
	if in.Holders <= 0 {
		bad("holders %d: must be at least 1", in.Holders)
	}
	if in.CopyDelay < 0 {
		bad("copy delay %v: cannot be negative", in.CopyDelay)
	}
	if !(in.GrantRate >= 0) || math.IsInf(in.GrantRate, 0) {
		bad("grant rate %v: must be a number of grants per second, 0 or more", in.GrantRate)
	}
	if in.TTL < 0 || (in.TTL > 0 && in.TTL < time.Millisecond) {
		bad("TTL %v: must be at least 1ms, the shortest a lease can be (0 chooses one)", in.TTL)
	}
	if in.CompareTTL <= 0 {
		bad("lease to compare the crash wait with %v: must be positive", in.CompareTTL)
	}
	return errors.Join(errs...)
}

// Advice is the guide's answer for one set of Inputs. Counts per day and
// per second are float64: they are expectations, not events.
type Advice struct {
	// Level is the level to use; Reasons say why, one guide rule each.
	Level   Level
	Reasons []string
	// TTL is the lease TTL: Inputs.TTL, or else ChooseTTL(P99). TTLNote
	// says how it was chosen.
	TTL     time.Duration
	TTLNote string
	// Renew is the renewal interval, TTL / RenewDivisor.
	Renew time.Duration
	// RenewalsPerSecond is Holders / Renew: the load the holders put on
	// the lock server.
	RenewalsPerSecond float64
	// CrashWait is the worst wait after a holder crashes: one TTL ("Work
	// waits at most one lease").
	CrashWait time.Duration
	// CompareTTL is the long lease compared with; CompareWaitRatio is
	// CompareTTL / TTL, how many times longer work waits after a crash
	// under it.
	CompareTTL       time.Duration
	CompareWaitRatio float64
	// SlowRunShare is the share of runs longer than the TTL (see
	// SlowRunShareAtLeast); ExpiriesWithoutRenewal is RunsPerDay ×
	// SlowRunShare: the leases a day that would expire under a live
	// holder if it did not renew, each a second holder. Renewing fixes it.
	SlowRunShare           float64
	SlowRunShareAtLeast    bool
	ExpiriesWithoutRenewal float64
	// OverlapsPerDay is RunsPerDay × PauseRate: runs a day where a second
	// holder starts while the first, paused past its lease, still believes
	// it holds the lock. Renewal cannot prevent these.
	OverlapsPerDay float64
	// BadWritesWithoutToken and BadWritesWithToken are the overlaps a day
	// that can overwrite good data under a lease without and with a
	// fencing token: every overlap without one; none with one, since the
	// storage refuses the stale write once the newer holder has written
	// (and whole values, not deltas, replace a stale write that came
	// first). Both 0 when a double run only wastes work.
	BadWritesWithoutToken float64
	BadWritesWithToken    float64
	// StaleWritesStopped is how many stale writes a day a token stops:
	// OverlapsPerDay ("up to 500 bad writes a day are stopped").
	StaleWritesStopped float64
	// GrantsAtRisk is GrantRate × CopyDelay: the grants a lock server
	// whose counter lives on an asynchronous follower may hand out again
	// after its leader crashes.
	GrantsAtRisk float64
	// Warnings are the guide's "what breaks" for this choice.
	Warnings []string
}

// ChooseTTL is the lease TTL for a job whose p99 run time is p99: half as
// long again, rounded up to a whole second and kept within MinTTL…MaxTTL.
// The guide's example pairs a 20 s p99 with a 30 s lease; the margin keeps
// 99 of 100 runs inside one lease even if every renewal failed, while the
// crash wait stays near the run time.
func ChooseTTL(p99 time.Duration) time.Duration {
	ttl := (p99*3/2 + time.Second - 1) / time.Second * time.Second
	return min(max(ttl, MinTTL), MaxTTL)
}

// Advise applies the guide to in, which must be valid (see
// [Inputs.Validate]); it panics otherwise. The guide's own example —
// p99 20 s, max 90 s, 1,000 runs a night by 1,000 holders — gives a 30 s
// TTL renewed every 10 s, 100 renewals/s, 10 expiries a night without
// renewal, and a 30 s crash wait that a 10-minute lease makes 20× longer.
func Advise(in Inputs) Advice {
	if err := in.Validate(); err != nil {
		panic("advise: invalid inputs: " + err.Error())
	}
	a := Advice{TTL: in.TTL, TTLNote: "as given", CompareTTL: in.CompareTTL}
	if a.TTL == 0 {
		a.TTL = ChooseTTL(in.P99)
		a.TTLNote = fmt.Sprintf("1.5 × the p99 run time (%v), rounded up to a second, within %v…%v", in.P99, MinTTL, MaxTTL)
	}
	// "renew every lease / 3. For a 30-second lease that is every 10
	// seconds. With 1,000 holders there are 1,000 / 10 = 100 renewals per
	// second."
	a.Renew = a.TTL / RenewDivisor
	a.RenewalsPerSecond = float64(in.Holders) / a.Renew.Seconds()
	// "Work waits at most one lease. A 30-second lease waits 30 seconds. A
	// 10-minute lease waits 600 seconds, which is 20 times longer (600 / 30)."
	a.CrashWait = a.TTL
	a.CompareWaitRatio = in.CompareTTL.Seconds() / a.TTL.Seconds()
	// "A 30-second lease expires on the slow runs: 1% of 1,000 restaurants
	// is 10 runs a night with a second holder." Only two points of the run
	// time distribution are known: none is slower than MaxRun, 1 in 100 is
	// slower than P99.
	switch {
	case a.TTL >= in.MaxRun:
		a.SlowRunShare = 0
	case a.TTL >= in.P99:
		a.SlowRunShare = 1.0 / tailOneIn
	default:
		a.SlowRunShare, a.SlowRunShareAtLeast = 1.0/tailOneIn, true
	}
	a.ExpiriesWithoutRenewal = float64(in.RunsPerDay) * a.SlowRunShare
	// "1 run in 10,000 freezes for longer than the lease, and there are
	// 5,000,000 runs a day. That is 5,000,000 / 10,000 = 500 runs a day
	// where a second holder starts while the first still believes it holds
	// the lock. [...] With a token, the database refuses a stale write once
	// the newer holder has written, so up to 500 bad writes a day are
	// stopped."
	a.OverlapsPerDay = float64(in.RunsPerDay) * in.PauseRate
	a.StaleWritesStopped = a.OverlapsPerDay
	if !in.DoubleRunOnlyWastesWork {
		a.BadWritesWithoutToken, a.BadWritesWithToken = a.OverlapsPerDay, 0
	}
	// "At the moment of a crash, 50 x 0.4 = 20 grants may not be copied."
	a.GrantsAtRisk = in.GrantRate * in.CopyDelay.Seconds()
	a.choose(in)
	return a
}

// choose sets the level, its reasons and warnings.
func (a *Advice) choose(in Inputs) {
	reason := func(format string, args ...any) { a.Reasons = append(a.Reasons, fmt.Sprintf(format, args...)) }
	warn := func(format string, args ...any) { a.Warnings = append(a.Warnings, fmt.Sprintf(format, args...)) }
	switch {
	case in.OneDatabase && in.MaxRun <= PlainLockMaxRun:
		a.Level = PlainLock
		reason("all the work happens inside one database: a row or advisory lock is released by the database when the transaction or session ends, so a crash needs no timer")
		reason("the critical part is short: the slowest run (%v) is within %v", in.MaxRun, PlainLockMaxRun)
		reason("one database already sees every writer, so the servers need no shared lock")
		warn("a hung connection can hold a row lock for a long time: set idle_in_transaction_session_timeout for holders and lock_timeout for waiters")
		warn("two locks taken in different orders can deadlock: lock in one fixed order")
		warn("if one conditional update (UPDATE … WHERE …) does the job, it needs no lock at all")
		return
	case in.DoubleRunOnlyWastesWork:
		a.Level = Lease
		reason("a double run only wastes work, so a lease is enough: make the work safe to repeat and a rare double run does no harm")
	default:
		a.Level = LeaseAndToken
		reason("a second holder would damage data, and a paused holder can still write after its lease ends: only the storage can refuse it, by its fencing token")
		if in.TargetChecksToken {
			reason("the target can check a token: check it and write in one step (UPDATE … SET …, last_token = $t WHERE … AND last_token <= $t; 0 rows: stop)")
		} else {
			reason("the target cannot check a token: before each action, claim a row for it in a database you own, fenced by the token (fencing.Ledger.Once), so it happens at most once")
		}
	}
	if in.OneDatabase {
		reason("the work is inside one database but runs up to %v, longer than a plain lock should be held (%v)", in.MaxRun, PlainLockMaxRun)
	}
	if in.Holders > 1 {
		reason("%d holders share the lock and any may crash: the time limit stops a dead holder from blocking work for more than one TTL", in.Holders)
	} else {
		reason("the holder may crash: the time limit stops a dead holder from blocking work for more than one TTL")
	}
	reason("renew every TTL/%d while working, and stop when renewing fails", RenewDivisor)
	if a.SlowRunShareAtLeast {
		warn("the TTL (%v) is below the p99 run time (%v): without renewal more than 1 run in %d would outlive its lease", a.TTL, in.P99, tailOneIn)
	}
	if a.Level == LeaseAndToken {
		warn("the check refuses a stale write only after the newer holder has written once: write whole new values, not changes to the old one")
		warn("a refused holder must stop, take the lock again and read fresh data")
	} else {
		warn("a lease can end while its holder is paused, so two holders run at once (%s a day here): checking the lease just before acting does not help", FormatCount(a.OverlapsPerDay))
	}
	warn("a token counter on an asynchronous follower can repeat after a failover: at %s grants/s with a %v copy delay, %s grants may not be copied when the leader crashes, and the new leader can grant the same tokens again. "+
		"Take tokens only where a write reaches a majority (fence commits each through raft before answering) or from the data's own database",
		FormatCount(in.GrantRate), in.CopyDelay, FormatCount(a.GrantsAtRisk))
}

// FormatCount prints an expected count as the report shows it: whole
// numbers in full, others to four significant digits.
func FormatCount(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.4g", x)
}
