package advise

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The series Judge reads: a fence server's (internal/metrics) and a storage
// service's (fencing/fencingmetrics).
const (
	seriesGrants         = "fence_grants_total"
	seriesExpirations    = "fence_lease_expirations_total"
	seriesRenewals       = "fence_renewals_total"
	seriesRenewalsFailed = "fence_renewals_failed_total"
	seriesStaleKV        = "fence_stale_writes_total"
	seriesStaleFencing   = "fencing_stale_writes_total"
	seriesHoldRatio      = "fence_lock_hold_ttl_ratio"
	seriesHoldSeconds    = "fence_lock_hold_seconds"
)

// Thresholds of Judge.
const (
	// MinHolds is how many ended grants Judge wants before it reads hold
	// times and expiries (one crashed holder says little); fewer, and only
	// the signs that count on their own (failed renewals, stale writes)
	// decide.
	MinHolds = 10
	// NearTTL: a p99 hold above this share of the TTL (up to 1) leaves
	// less room than the guide's TTL of 1.5 × p99 (2/3).
	NearTTL = 2.0 / 3
	// FarBelowTTL: a p99 hold at most this share of the TTL means the TTL
	// is over 5 × what holders need, and a crash makes work wait all of it.
	FarBelowTTL = 0.2
	// ExpiredShareLimit: more grants than this ending by expiry is more
	// than the guide's "slowest 1 in 100".
	ExpiredShareLimit = 1.0 / tailOneIn
)

// Verdict is what Judge concludes about a server's lease lengths.
type Verdict string

// Verdicts.
const (
	TooShort      Verdict = "too short"
	TooLong       Verdict = "too long"
	AboutRight    Verdict = "about right"
	NotEnoughData Verdict = "not enough data"
)

// Histogram is one cumulative Prometheus histogram (several series with
// the same buckets summed).
type Histogram struct {
	Count float64
	// Bounds are the upper bounds, ascending, without +Inf; Cumulative[i]
	// counts the observations ≤ Bounds[i].
	Bounds     []float64
	Cumulative []float64
}

// add sums m into h; a bucket missing from either counts as empty.
func (h *Histogram) add(m *dto.Histogram) {
	h.Count += float64(m.GetSampleCount())
	for _, b := range m.GetBucket() {
		ub := b.GetUpperBound()
		if math.IsInf(ub, 1) {
			continue
		}
		i := sort.SearchFloat64s(h.Bounds, ub)
		if i == len(h.Bounds) || h.Bounds[i] != ub {
			h.Bounds = append(h.Bounds[:i], append([]float64{ub}, h.Bounds[i:]...)...)
			h.Cumulative = append(h.Cumulative[:i], append([]float64{0}, h.Cumulative[i:]...)...)
		}
		h.Cumulative[i] += float64(b.GetCumulativeCount())
	}
}

// Quantile returns an upper bound of the q quantile: the upper bound of
// the first bucket holding at least q of the observations; +Inf if only the
// last (+Inf) bucket does, NaN if there are none.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	for i, c := range h.Cumulative {
		if c >= q*h.Count {
			return h.Bounds[i]
		}
	}
	return math.Inf(1)
}

// lowerBound returns the bucket bound below ub (0 for the first).
func (h Histogram) lowerBound(ub float64) float64 {
	i := sort.SearchFloat64s(h.Bounds, ub)
	if i == 0 {
		return 0
	}
	return h.Bounds[i-1]
}

// Observed is what metrics scraped from fence servers (and storage
// services using fencingmetrics) say. Counters are summed over the scrapes
// given to ParseMetrics.
type Observed struct {
	Grants, Expirations, Renewals float64
	// RenewalsFailed: renewals that arrived after their lease had ended.
	RenewalsFailed float64
	// StaleRefused: stale writes refused, by fence's fenced key-value store
	// and by fencing in enforce mode. StaleLetThrough: stale writes that
	// fencing's observe mode let through.
	StaleRefused, StaleLetThrough float64
	// HoldRatio and HoldSeconds are the hold-time histograms of grants
	// their holders ended (released or revoked); Expired is how many grants
	// ended by expiry, Ended how many ended at all.
	HoldRatio, HoldSeconds Histogram
	Expired, Ended         float64
	// HasHoldTimes: the server exports hold times (fence_lock_hold_ttl_ratio).
	HasHoldTimes bool
}

// ParseMetrics adds the Prometheus text exposition read from r to o.
func (o *Observed) ParseMetrics(r io.Reader) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("not Prometheus metrics: %w", err)
	}
	sum := func(name string, keep func(labels map[string]string) bool) float64 {
		var total float64
		for _, m := range families[name].GetMetric() {
			if keep == nil || keep(labels(m)) {
				total += m.GetCounter().GetValue()
			}
		}
		return total
	}
	o.Grants += sum(seriesGrants, nil)
	o.Expirations += sum(seriesExpirations, nil)
	o.Renewals += sum(seriesRenewals, nil)
	o.RenewalsFailed += sum(seriesRenewalsFailed, nil)
	o.StaleRefused += sum(seriesStaleKV, nil) + sum(seriesStaleFencing, func(l map[string]string) bool { return l["mode"] == "enforce" })
	o.StaleLetThrough += sum(seriesStaleFencing, func(l map[string]string) bool { return l["mode"] == "observe" })
	if f := families[seriesHoldRatio]; f != nil {
		o.HasHoldTimes = true
		for _, m := range f.GetMetric() {
			o.Ended += float64(m.GetHistogram().GetSampleCount())
			switch labels(m)["cause"] {
			case "released", "revoked":
				o.HoldRatio.add(m.GetHistogram())
			case "expired":
				o.Expired += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for _, m := range families[seriesHoldSeconds].GetMetric() {
		if c := labels(m)["cause"]; c == "released" || c == "revoked" {
			o.HoldSeconds.add(m.GetHistogram())
		}
	}
	return nil
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// Judgement is Judge's answer: the verdict, the findings behind it, one
// per sign, and the figures they quote.
type Judgement struct {
	Verdict  Verdict
	Findings []string
	// HoldP99Ratio is an upper bound of the p99 hold time over the TTL, of
	// grants their holders ended (NaN: none); HoldP99 the same in time.
	HoldP99Ratio float64
	HoldP99      time.Duration
	// ExpiredShare is Expired / Ended (NaN: none ended).
	ExpiredShare float64
	// SuggestedTTL, when the verdict is TooLong, is ChooseTTL(HoldP99).
	SuggestedTTL time.Duration
}

// Judge reads o the way the guide's staff engineer would: "I track
// refused stale writes and failed renewals, because a rise in either
// means the leases are too short". Too short: any failed renewal, any
// stale write, or, of at least MinHolds ended grants, more than 1 in 100
// ending by expiry or a p99 hold above 2/3 of the TTL but within it. Too
// long: none of those, at least MinHolds grants ended by their holders,
// and a p99 hold within a fifth of the TTL (a crash makes work wait over
// 5 × longer than holders need).
func Judge(o Observed) Judgement {
	j := Judgement{HoldP99Ratio: o.HoldRatio.Quantile(0.99), ExpiredShare: math.NaN()}
	if s := o.HoldSeconds.Quantile(0.99); !math.IsNaN(s) && !math.IsInf(s, 0) {
		j.HoldP99 = time.Duration(s * float64(time.Second))
	}
	if o.Ended > 0 {
		j.ExpiredShare = o.Expired / o.Ended
	}
	find := func(format string, a ...any) { j.Findings = append(j.Findings, fmt.Sprintf(format, a...)) }
	short := false
	if o.RenewalsFailed > 0 {
		short = true
		find("%s renewals arrived after their lease had ended: holders were alive but too late (pauses longer than the TTL allows, or network trouble)", FormatCount(o.RenewalsFailed))
	}
	if o.StaleRefused > 0 {
		short = true
		find("%s stale writes were refused: a holder wrote after its lease had ended", FormatCount(o.StaleRefused))
	}
	if o.StaleLetThrough > 0 {
		short = true
		find("%s stale writes were let through by fencing's observe mode: a holder wrote after its lease had ended, and enforce mode would have refused it", FormatCount(o.StaleLetThrough))
	}
	if o.Ended >= MinHolds && j.ExpiredShare > ExpiredShareLimit {
		short = true
		find("%s of %s grants ended by expiry (%.1f%%), more than 1 in %d: either holders crash that often, or runs outlive leases they do not renew",
			FormatCount(o.Expired), FormatCount(o.Ended), 100*j.ExpiredShare, tailOneIn)
	}
	enough := o.HoldRatio.Count >= MinHolds
	if enough && j.HoldP99Ratio > NearTTL && j.HoldP99Ratio <= 1 {
		short = true
		find("99 of 100 holds ended within %.2g × their TTL, but not within %.2g ×: a slower run or a pause outlives the lease unless it is renewed (the guide: a TTL of 1.5 × the p99 run time)",
			j.HoldP99Ratio, o.HoldRatio.lowerBound(j.HoldP99Ratio))
	}
	switch {
	case short:
		j.Verdict = TooShort
	case !o.HasHoldTimes:
		j.Verdict = NotEnoughData
		find("the server exports no hold times (%s): it is older than this fence", seriesHoldRatio)
	case !enough:
		j.Verdict = NotEnoughData
		find("only %s grants were released so far; judging hold times needs %d", FormatCount(o.HoldRatio.Count), MinHolds)
	case j.HoldP99Ratio <= FarBelowTTL:
		j.Verdict = TooLong
		find("99 of 100 holds ended within %.2g × their TTL: a crashed holder makes work wait the whole TTL, over %.0f times longer than holders need", j.HoldP99Ratio, 1/FarBelowTTL)
		if j.HoldP99 > 0 {
			j.SuggestedTTL = ChooseTTL(j.HoldP99)
			find("99 of 100 holds ended within %v: a TTL of %v (1.5 × that, renewed every %v) would do", j.HoldP99, j.SuggestedTTL, j.SuggestedTTL/RenewDivisor)
		}
	default:
		j.Verdict = AboutRight
		find("99 of 100 holds ended within %.2g × their TTL, no renewal failed and no stale write was seen", j.HoldP99Ratio)
	}
	if o.Ended == 0 && o.Grants == 0 {
		j.Findings = append(j.Findings, "no grants yet: run this against a server that has had some work")
	}
	return j
}
