package metrics

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// The prefix label values that are not a name's prefix.
const (
	// NoPrefix is the prefix label of names without the separator: one
	// fixed bucket, never the name itself (each would be a series).
	NoPrefix = "(none)"
	// OtherPrefix is the prefix label of names whose prefix came after
	// PrefixConfig.Max others had been seen.
	OtherPrefix = "(other)"
)

// PrefixConfig says how a lock name maps to the prefix label of the
// per-prefix metrics.
type PrefixConfig struct {
	// Separator ends a prefix ("/" by default).
	Separator string
	// Depth is how many separators the prefix runs to (1: up to and
	// including the first). A name with fewer but at least one gets the
	// prefix up to its last separator; a name with none gets NoPrefix.
	Depth int
	// Max is how many distinct prefixes get their own label, the first
	// seen since the process started (in the order this member applied
	// the log); later ones are counted under OtherPrefix. 0: every name
	// is OtherPrefix.
	Max int
}

// Limits of PrefixConfig.
const (
	MaxPrefixSeparator = 16
	MaxPrefixDepth     = 16
	MaxPrefixes        = 10000
)

// DefaultPrefixConfig is up to the first "/", at most 200 prefixes.
func DefaultPrefixConfig() PrefixConfig { return PrefixConfig{Separator: "/", Depth: 1, Max: 200} }

// Validate says what is wrong with c, naming the flags of 'fence serve'.
func (c PrefixConfig) Validate() error {
	switch {
	case c.Separator == "" || len(c.Separator) > MaxPrefixSeparator:
		return fmt.Errorf("--metrics-prefix-separator %q: want 1 to %d bytes", c.Separator, MaxPrefixSeparator)
	case !utf8.ValidString(c.Separator):
		// A part of a character would cut names inside one: a label
		// that is not UTF-8, which Prometheus refuses (with a panic).
		return fmt.Errorf("--metrics-prefix-separator %q: want valid UTF-8", c.Separator)
	case c.Depth < 1 || c.Depth > MaxPrefixDepth:
		return fmt.Errorf("--metrics-prefix-depth %d: want 1 to %d", c.Depth, MaxPrefixDepth)
	case c.Max < 0 || c.Max > MaxPrefixes:
		return fmt.Errorf("--metrics-max-prefixes %d: want 0 to %d", c.Max, MaxPrefixes)
	}
	return nil
}

// Cut returns the prefix of name: up to and including its Depth-th
// separator (or its last, if it has fewer), or NoPrefix. It shares
// name's memory.
func (c PrefixConfig) Cut(name string) string {
	end := -1
	for d, from := 0, 0; d < c.Depth; d++ {
		i := strings.Index(name[from:], c.Separator)
		if i < 0 {
			break
		}
		from += i + len(c.Separator)
		end = from
	}
	if end < 0 {
		return NoPrefix
	}
	return name[:end]
}

// Prefix is the per-prefix series of one prefix label. Its methods are
// safe for concurrent use and allocate nothing once its series exist
// (each appears when first used).
type Prefix struct {
	label string
	m     *Server
	mu    sync.Mutex // guards the series below, made lazily
	hold  [len(causes)]struct{ seconds, ratio prometheus.Observer }
	wait  prometheus.Observer
	// expired and delay count grants ended by expiry and refusals for
	// lock-delay.
	expired, delay prometheus.Counter
}

// causes are the cause label values of the hold-time histograms.
var causes = [...]string{"released", "expired", "revoked", "force-released"}

// lazy returns *p, made by mk under mu the first time.
func lazy[T comparable](mu *sync.Mutex, p *T, mk func() T) T {
	mu.Lock()
	defer mu.Unlock()
	var zero T
	if *p == zero {
		*p = mk()
	}
	return *p
}

// Label returns the prefix label.
func (p *Prefix) Label() string { return p.label }

// ObserveHold records a grant of a name under p that ended for cause
// (released, expired, revoked or force-released; another is ignored)
// after being held for held, under a lease with ttl (0: unknown, only the
// seconds are kept).
func (p *Prefix) ObserveHold(cause string, held, ttl time.Duration) {
	c := slices.Index(causes[:], cause)
	if c < 0 {
		return
	}
	h := &p.hold[c]
	seconds := lazy(&p.mu, &h.seconds, func() prometheus.Observer { return p.m.HoldSeconds.WithLabelValues(cause, p.label) })
	seconds.Observe(held.Seconds())
	if ttl > 0 {
		ratio := lazy(&p.mu, &h.ratio, func() prometheus.Observer { return p.m.HoldTTLRatio.WithLabelValues(cause, p.label) })
		ratio.Observe(held.Seconds() / ttl.Seconds())
	}
}

// ObserveWait records a queued acquire of a name under p granted after
// waiting for d.
func (p *Prefix) ObserveWait(d time.Duration) {
	lazy(&p.mu, &p.wait, func() prometheus.Observer { return p.m.WaitSeconds.WithLabelValues(p.label) }).Observe(d.Seconds())
}

// ExpiredHeld counts a grant of a name under p ended by its lease's expiry.
func (p *Prefix) ExpiredHeld() {
	lazy(&p.mu, &p.expired, func() prometheus.Counter { return p.m.ExpiredHeld.WithLabelValues(p.label) }).Inc()
}

// DelayRefused counts a try-acquire of a name under p refused for
// lock-delay.
func (p *Prefix) DelayRefused() {
	lazy(&p.mu, &p.delay, func() prometheus.Counter { return p.m.LockDelayRefused.WithLabelValues(p.label) }).Inc()
}

// prefixes maps names to their Prefix, admitting at most cfg.Max labels.
type prefixes struct {
	cfg   PrefixConfig
	mu    sync.Mutex
	by    map[string]*Prefix // admitted labels, NoPrefix and OtherPrefix
	count int                // admitted labels other than those two
}

func newPrefixes(m *Server, cfg PrefixConfig) *prefixes {
	p := &prefixes{cfg: cfg, by: map[string]*Prefix{}}
	for _, l := range []string{NoPrefix, OtherPrefix} {
		p.by[l] = &Prefix{label: l, m: m}
	}
	return p
}

// of returns the Prefix of name. A name of a new prefix allocates its
// label once; a known one allocates nothing.
func (p *prefixes) of(m *Server, name string) *Prefix {
	label := p.cfg.Cut(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if x := p.by[label]; x != nil {
		return x
	}
	if p.count >= p.cfg.Max {
		return p.by[OtherPrefix]
	}
	p.count++
	x := &Prefix{label: strings.Clone(label), m: m}
	p.by[x.label] = x
	return x
}

// Prefix returns the per-prefix series of lock name's prefix label
// (admitting a new prefix while fewer than PrefixConfig.Max are).
func (m *Server) Prefix(name string) *Prefix { return m.prefixes.of(m, name) }

// PrefixLabel returns the prefix label of lock name, as Prefix does.
func (m *Server) PrefixLabel(name string) string { return m.Prefix(name).label }

// queueCollector is fence_lock_waiters{prefix}: at each scrape, the
// waiters of every lock summed by prefix label; every admitted label is
// reported, 0 included, so the series count stays bounded by the cap.
type queueCollector struct {
	m     *Server
	queue func(fn func(name string, waiters int))
}

var lockWaiters = prometheus.NewDesc("fence_lock_waiters",
	"Acquires waiting in lock queues, by lock-name prefix (--metrics-prefix-*), read at each scrape.", []string{"prefix"}, nil)

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lockWaiters }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	sums := map[*Prefix]int{}
	c.queue(func(name string, waiters int) { sums[c.m.Prefix(name)] += waiters })
	c.m.prefixes.mu.Lock()
	all := make([]*Prefix, 0, len(c.m.prefixes.by))
	for _, x := range c.m.prefixes.by {
		all = append(all, x)
	}
	c.m.prefixes.mu.Unlock()
	for _, x := range all {
		ch <- prometheus.MustNewConstMetric(lockWaiters, prometheus.GaugeValue, float64(sums[x]), x.label)
	}
}
