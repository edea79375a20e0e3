package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fencehq/fence/internal/advise"
)

// metricsTimeout bounds one scrape of --metrics.
const metricsTimeout = 10 * time.Second

// stdinIsTerminal reports whether r is a terminal, where advise may ask for
// what its flags left out. A variable so tests can stand in a terminal.
var stdinIsTerminal = func(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

func newAdvise(g *globals) *cobra.Command {
	in := advise.DefaultInputs()
	var (
		pauseRate  string
		asJSON     bool
		metricURLs []string
	)
	cmd := &cobra.Command{
		Use:   "advise",
		Short: "Which level of safety a job needs (plain lock, lease, lease + fencing token), with its TTL and numbers",
		Long: `advise applies the decision guide "Lease vs lock vs fencing token" to your
job: from its run times, pause rate, runs per day, holders and three yes/no
questions it names the level to use and why, the lease TTL and renewal
interval (TTL/3), renewals per second, the worst wait after a crash, lease
expiries and overlapping holders per day without and with a fencing token,
and the grants a lock server whose counter sits on an asynchronous follower
may repeat after a failover.

The TTL is 1.5 × the p99 run time, rounded up to a second (the guide pairs a
20 s p99 with a 30 s lease), unless --ttl gives one to judge. The pause rate,
copy delay, grant rate and the long lease compared with default to the
guide's assumptions. On a terminal, advise asks for what the flags leave out.

With --metrics it reads a running server's /metrics (and, given again, a
storage service's fencing metrics) and says whether its leases look too
short (failed renewals, stale writes, expiries, holds near the TTL) or too
long (holds far below the TTL).`,
		Example: `  fence advise --p99 20s --max-run 90s --runs-per-day 1000 --holders 1000 --target-checks-token
  fence advise --p99 2s --max-run 20s --runs-per-day 50000 --holders 20 --double-run-only-wastes-work --json
  fence advise --metrics 127.0.0.1:7301`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var report adviseReport
			f := cmd.Flags()
			if len(metricURLs) == 0 || anyChanged(f, jobFlags...) {
				if err := askMissing(cmd); err != nil {
					return err
				}
				rate, err := parseRate(pauseRate)
				if err != nil {
					return usageError(cmd, fmt.Errorf("--pause-rate %q: %w", pauseRate, err))
				}
				in.PauseRate = rate
				if err := in.Validate(); err != nil {
					return usageError(cmd, errors.New(strings.ReplaceAll(err.Error(), "\n", "; ")))
				}
				a := advise.Advise(in)
				report.Advice = &a
				report.inputs = in
			}
			if len(metricURLs) > 0 {
				var o advise.Observed
				for _, u := range metricURLs {
					if err := g.scrape(cmd.Context(), u, &o); err != nil {
						return err
					}
				}
				j := advise.Judge(o)
				report.Judgement, report.observed = &j, o
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), report.json())
			}
			return report.print(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.DurationVar(&in.P99, "p99", 0, "run time 99 of 100 runs end within (e.g. 20s)")
	f.DurationVar(&in.MaxRun, "max-run", 0, "the slowest run's time (e.g. 90s)")
	f.IntVar(&in.RunsPerDay, "runs-per-day", 0, "how many times a day the lock is taken")
	f.IntVar(&in.Holders, "holders", 0, "how many holders keep a lease at once (each renews)")
	f.BoolVar(&in.OneDatabase, "one-database", false, "all the work happens inside one database")
	f.BoolVar(&in.TargetChecksToken, "target-checks-token", false, "what the work writes to can check a token (a row or API you own; not an SMS or payment provider)")
	f.BoolVar(&in.DoubleRunOnlyWastesWork, "double-run-only-wastes-work", false, "two holders at once waste work but damage nothing")
	f.StringVar(&pauseRate, "pause-rate", "1/10000", "share of runs whose holder freezes longer than its lease: 1/10000, 0.0001 or 0.01%")
	f.DurationVar(&in.CopyDelay, "copy-delay", in.CopyDelay, "how far a lock server's follower lags its leader (failover)")
	f.Float64Var(&in.GrantRate, "grant-rate", in.GrantRate, "the lock server's grants per second (failover)")
	f.DurationVar(&in.TTL, "ttl", 0, "judge this lease TTL instead of choosing one (0: 1.5 × --p99)")
	f.DurationVar(&in.CompareTTL, "compare-ttl", in.CompareTTL, "a long lease to compare the crash wait with")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringArrayVar(&metricURLs, "metrics", nil, "a running server's metrics URL or host:port (its --metrics-addr); repeat to add a storage service's fencing metrics")
	positive(f, "compare-ttl")
	return cmd
}

// jobFlags are the job's own figures: no default stands in for them.
var jobFlags = []string{"p99", "max-run", "runs-per-day", "holders"}

// yesNoFlags are the guide's three questions.
var yesNoFlags = []string{"one-database", "target-checks-token", "double-run-only-wastes-work"}

func anyChanged(f *pflag.FlagSet, names ...string) bool {
	for _, n := range names {
		if f.Changed(n) {
			return true
		}
	}
	return false
}

// askMissing does nothing when every job flag is given. Otherwise, on a
// terminal, it asks for the job flags not given and the yes/no questions not
// answered, setting the flags; elsewhere it refuses the missing job flags.
// The guide's assumptions keep their defaults unless given.
func askMissing(cmd *cobra.Command) error {
	f := cmd.Flags()
	var missing []string
	for _, n := range jobFlags {
		if !f.Changed(n) {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !stdinIsTerminal(cmd.InOrStdin()) {
		return usageError(cmd, fmt.Errorf("missing %s: the job's own figures have no default", strings.Join(missing, ", ")))
	}
	answers := bufio.NewScanner(cmd.InOrStdin())
	for _, n := range append(append([]string{}, jobFlags...), yesNoFlags...) {
		if f.Changed(n) {
			continue
		}
		fl := f.Lookup(n)
		question := fl.Usage + "? "
		if fl.Value.Type() == "bool" {
			question = fl.Usage + " (y/n)? "
		}
		for {
			fmt.Fprint(cmd.ErrOrStderr(), question)
			if !answers.Scan() {
				return usageError(cmd, fmt.Errorf("no answer for --%s", n))
			}
			a := strings.TrimSpace(answers.Text())
			if fl.Value.Type() == "bool" {
				switch strings.ToLower(a) {
				case "y", "yes":
					a = "true"
				case "n", "no":
					a = "false"
				}
			}
			if err := f.Set(n, a); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "  %v\n", err)
				continue
			}
			break
		}
	}
	return nil
}

// parseRate reads a share of runs: "1/10000", "0.0001" or "0.01%".
func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	var r float64
	var err error
	switch num, den, isFraction := strings.Cut(s, "/"); {
	case isFraction:
		var n, d float64
		if n, err = strconv.ParseFloat(strings.TrimSpace(num), 64); err == nil {
			d, err = strconv.ParseFloat(strings.TrimSpace(den), 64)
		}
		if err == nil && d == 0 {
			return 0, errors.New("division by zero")
		}
		r = n / d
	case strings.HasSuffix(s, "%"):
		r, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		r /= 100
	default:
		r, err = strconv.ParseFloat(s, 64)
	}
	if err != nil {
		return 0, errors.New("not a share of runs (1/10000, 0.0001 or 0.01%)")
	}
	return r, nil
}

// scrape reads the metrics at u into o. u is a URL, or host:port for its
// /metrics over TLS (plain HTTP with --insecure).
func (g *globals) scrape(ctx context.Context, u string, o *advise.Observed) error {
	parsed, hc, err := g.metricsPort("--metrics", u, "/metrics")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	u = parsed.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("--metrics %s: %w", u, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("--metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("--metrics %s: %s", u, resp.Status)
	}
	if err := o.ParseMetrics(resp.Body); err != nil {
		return fmt.Errorf("--metrics %s: %w", u, err)
	}
	return nil
}

// adviseReport is what advise prints: the advice for the job, the
// judgement of the metrics, or both.
type adviseReport struct {
	Advice    *advise.Advice
	inputs    advise.Inputs
	Judgement *advise.Judgement
	observed  advise.Observed
}

func (r adviseReport) print(w io.Writer) error {
	if a := r.Advice; a != nil {
		in := r.inputs
		fmt.Fprintf(w, "level: %s\n", a.Level)
		fmt.Fprintln(w, "why:")
		for _, s := range a.Reasons {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		if a.Level == advise.PlainLock {
			fmt.Fprintln(w, "if a lease is used instead:")
		}
		fmt.Fprintln(w, "figures:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		row := func(name, value, note string) { fmt.Fprintf(tw, "  %s\t%s\t%s\n", name, value, note) }
		row("TTL", a.TTL.String(), a.TTLNote)
		renew := a.Renew.Round(time.Millisecond)
		row("renew every", renew.String(), fmt.Sprintf("TTL/%d", advise.RenewDivisor))
		row("renewals per second", advise.FormatCount(a.RenewalsPerSecond), fmt.Sprintf("%d holders / %v", in.Holders, renew))
		row("worst wait after a crash", a.CrashWait.String(), fmt.Sprintf("one TTL; a %v lease waits %s s, %s× longer",
			a.CompareTTL, advise.FormatCount(a.CompareTTL.Seconds()), advise.FormatCount(a.CompareWaitRatio)))
		slow := fmt.Sprintf("no run outlives the TTL, of %d runs", in.RunsPerDay)
		if a.SlowRunShare > 0 {
			atLeast := ""
			if a.SlowRunShareAtLeast {
				atLeast = "at least "
			}
			slow = fmt.Sprintf("%s1 run in %s outlives the TTL, of %d runs; renewing fixes these", atLeast, advise.FormatCount(1/a.SlowRunShare), in.RunsPerDay)
		}
		row("lease expiries a day without renewal", advise.FormatCount(a.ExpiriesWithoutRenewal), slow)
		row("overlaps a day (paused holders)", advise.FormatCount(a.OverlapsPerDay),
			fmt.Sprintf("%d runs × a pause rate of %g: a second holder starts while the first still believes it holds the lock", in.RunsPerDay, in.PauseRate))
		row("bad writes a day without a token", advise.FormatCount(a.BadWritesWithoutToken), "each overlap can overwrite good data (none if a double run only wastes work)")
		row("bad writes a day with a token", advise.FormatCount(a.BadWritesWithToken),
			fmt.Sprintf("up to %s stale writes a day refused", advise.FormatCount(a.StaleWritesStopped)))
		row("grants at risk in a failover", advise.FormatCount(a.GrantsAtRisk),
			fmt.Sprintf("%s grants/s × %v copy delay, if the counter sat on an asynchronous follower", advise.FormatCount(in.GrantRate), in.CopyDelay))
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "warnings:")
		for _, s := range a.Warnings {
			fmt.Fprintf(w, "  - %s\n", s)
		}
	}
	if j := r.Judgement; j != nil {
		if r.Advice != nil {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "leases: %s\n", j.Verdict)
		for _, s := range j.Findings {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		o := r.observed
		fmt.Fprintf(w, "  (grants %s, renewals %s, failed renewals %s, expirations %s, stale writes refused %s)\n",
			advise.FormatCount(o.Grants), advise.FormatCount(o.Renewals), advise.FormatCount(o.RenewalsFailed),
			advise.FormatCount(o.Expirations), advise.FormatCount(o.StaleRefused))
	}
	return nil
}

// adviceJSON and judgementJSON are the --json shapes (stable field names
// for scripts; spans in seconds).
type adviceJSON struct {
	Level                  string   `json:"level"`
	Reasons                []string `json:"reasons"`
	TTLSeconds             float64  `json:"ttl_seconds"`
	TTLNote                string   `json:"ttl_note"`
	RenewSeconds           float64  `json:"renew_every_seconds"`
	RenewalsPerSecond      float64  `json:"renewals_per_second"`
	CrashWaitSeconds       float64  `json:"worst_wait_after_crash_seconds"`
	CompareTTLSeconds      float64  `json:"compare_ttl_seconds"`
	CompareWaitRatio       float64  `json:"compare_wait_ratio"`
	SlowRunShare           float64  `json:"slow_run_share"`
	SlowRunShareAtLeast    bool     `json:"slow_run_share_at_least"`
	ExpiriesWithoutRenewal float64  `json:"lease_expiries_per_day_without_renewal"`
	OverlapsPerDay         float64  `json:"overlaps_per_day"`
	BadWritesWithoutToken  float64  `json:"bad_writes_per_day_without_token"`
	BadWritesWithToken     float64  `json:"bad_writes_per_day_with_token"`
	StaleWritesStopped     float64  `json:"stale_writes_stopped_per_day"`
	GrantsAtRisk           float64  `json:"grants_at_risk_in_failover"`
	Warnings               []string `json:"warnings"`
}

type judgementJSON struct {
	Verdict  string   `json:"verdict"`
	Findings []string `json:"findings"`
	// Absent when unknown (no holds, or none within a bucket).
	HoldP99TTLRatio     *float64 `json:"hold_p99_ttl_ratio,omitempty"`
	HoldP99Seconds      *float64 `json:"hold_p99_seconds,omitempty"`
	ExpiredShare        *float64 `json:"expired_share,omitempty"`
	SuggestedTTLSeconds *float64 `json:"suggested_ttl_seconds,omitempty"`
	Grants              float64  `json:"grants"`
	Renewals            float64  `json:"renewals"`
	RenewalsFailed      float64  `json:"renewals_failed"`
	Expirations         float64  `json:"expirations"`
	StaleRefused        float64  `json:"stale_writes_refused"`
	StaleLetThrough     float64  `json:"stale_writes_let_through"`
}

type adviseJSON struct {
	Advice  *adviceJSON    `json:"advice,omitempty"`
	Metrics *judgementJSON `json:"metrics,omitempty"`
}

// finite is x, or nil for NaN, ±Inf and (when zeroUnknown) 0.
func finite(x float64, zeroUnknown bool) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || (zeroUnknown && x == 0) {
		return nil
	}
	return &x
}

func (r adviseReport) json() adviseJSON {
	var out adviseJSON
	if a := r.Advice; a != nil {
		out.Advice = &adviceJSON{Level: string(a.Level), Reasons: a.Reasons, TTLSeconds: a.TTL.Seconds(), TTLNote: a.TTLNote,
			RenewSeconds: a.Renew.Seconds(), RenewalsPerSecond: a.RenewalsPerSecond, CrashWaitSeconds: a.CrashWait.Seconds(),
			CompareTTLSeconds: a.CompareTTL.Seconds(), CompareWaitRatio: a.CompareWaitRatio, SlowRunShare: a.SlowRunShare,
			SlowRunShareAtLeast: a.SlowRunShareAtLeast, ExpiriesWithoutRenewal: a.ExpiriesWithoutRenewal, OverlapsPerDay: a.OverlapsPerDay,
			BadWritesWithoutToken: a.BadWritesWithoutToken, BadWritesWithToken: a.BadWritesWithToken, StaleWritesStopped: a.StaleWritesStopped,
			GrantsAtRisk: a.GrantsAtRisk, Warnings: a.Warnings}
	}
	if j := r.Judgement; j != nil {
		o := r.observed
		out.Metrics = &judgementJSON{Verdict: string(j.Verdict), Findings: j.Findings,
			HoldP99TTLRatio: finite(j.HoldP99Ratio, false), HoldP99Seconds: finite(j.HoldP99.Seconds(), true),
			ExpiredShare: finite(j.ExpiredShare, false), SuggestedTTLSeconds: finite(j.SuggestedTTL.Seconds(), true),
			Grants: o.Grants, Renewals: o.Renewals, RenewalsFailed: o.RenewalsFailed, Expirations: o.Expirations,
			StaleRefused: o.StaleRefused, StaleLetThrough: o.StaleLetThrough}
	}
	return out
}

// metricsPort resolves u, given as flag, to a URL of a server's metrics
// port — a URL, or host:port over TLS (plain HTTP with --insecure), with
// path when it names none — and an HTTP client that speaks to it. The
// metrics port speaks TLS like the others: it is trusted, and a client
// certificate shown, as for client commands (--ca/--cert/--key, or the dev
// server's).
func (g *globals) metricsPort(flag, u, path string) (*url.URL, *http.Client, error) {
	if !strings.Contains(u, "://") {
		scheme := "https://"
		if g.insecure {
			scheme = "http://"
		}
		u = scheme + u
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return nil, nil, &exitError{ExitUsage, fmt.Errorf("%s %s: %w", flag, u, err)}
	}
	if parsed.Path == "" {
		parsed.Path = path
	}
	hc := &http.Client{}
	if parsed.Scheme == "https" {
		tg := *g
		tg.servers, tg.insecure = parsed.Host, false // its own host decides whether the dev certificates may serve
		cfg, err := tg.tlsConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", flag, parsed, err)
		}
		hc.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	return parsed, hc, nil
}
