// Package metrics defines fence's Prometheus collectors. Nothing registers
// itself: New registers on the Registerer it is given, so two servers in one
// process (tests, embedding) keep separate counts.
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/internal/buildinfo"
)

// Server holds the lock server's collectors. Safe for concurrent use.
type Server struct {
	Grants      prometheus.Counter
	Releases    prometheus.Counter
	Expirations prometheus.Counter
	Revocations prometheus.Counter
	Renewals    prometheus.Counter
	// LockDelayRefused counts try-acquires refused because the lock was in
	// lock-delay, by prefix label (see Prefix).
	LockDelayRefused *prometheus.CounterVec
	StaleWrites      prometheus.Counter
	ApplyLatency     prometheus.Histogram
	BatchSize        prometheus.Histogram
	// AuthDenied counts calls the policy refused, by gRPC code
	// (Unauthenticated: no identity; PermissionDenied: not granted).
	AuthDenied *prometheus.CounterVec
	// RenewalsFailed counts renewals that reached the log after their
	// lease had ended: a holder alive but too late.
	RenewalsFailed prometheus.Counter
	// HoldSeconds and HoldTTLRatio observe each grant when it ends, by
	// cause (released, expired, revoked, force-released) and prefix label:
	// how long it was held, and that as a share of its lease's TTL. Use
	// Prefix(name).ObserveHold.
	HoldSeconds  *prometheus.HistogramVec
	HoldTTLRatio *prometheus.HistogramVec
	// WaitSeconds observes each queued acquire when it is granted, by
	// prefix label: how long it waited, on the log's clock. Use
	// Prefix(name).ObserveWait.
	WaitSeconds *prometheus.HistogramVec
	// ExpiredHeld counts grants ended by their lease's expiry, by prefix
	// label. Use Prefix(name).ExpiredHeld.
	ExpiredHeld *prometheus.CounterVec
	// RenewalSlack observes each committed renewal: how much of its
	// lease was left (deadline minus the renewal's apply, on the log's
	// clock). No prefix label: one lease may hold names of many prefixes.
	RenewalSlack prometheus.Histogram

	prefixes *prefixes
}

// HoldRatioBuckets are the buckets of fence_lock_hold_ttl_ratio: fine
// around 1, where a hold meets its TTL ('fence advise --metrics' reads them).
var HoldRatioBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 1.0 / 3, 0.5, 2.0 / 3, 0.8, 0.9, 1, 1.5, 2, 5, 10, 100}

// SlackBuckets are the buckets of fence_renewal_slack_seconds: a renewal
// every TTL/3 leaves about 2/3 of the TTL; a bucket at or below 0 counts
// renewals of leases already overdue.
var SlackBuckets = []float64{-1, 0, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560}

// Gauges reads live sizes from the state when Prometheus scrapes.
type Gauges struct {
	Leases   func() float64
	Locks    func() float64
	Waiters  func() float64
	IsLeader func() float64
	// LastToken is the last fencing token granted (optional).
	LastToken func() float64
	// Raft reads the node's raft status (optional).
	Raft func() RaftStatus
	// Peers reads the other members as this node sees them (optional).
	Peers func() []Peer
	// Queues calls fn with every lock that has waiters (optional): the
	// fence_lock_waiters gauge sums them by prefix label.
	Queues func(fn func(name string, waiters int))
	// Prefixes maps lock names to prefix labels (zero: DefaultPrefixConfig).
	Prefixes PrefixConfig
}

// Peer is another member as the per-peer gauges show it.
type Peer struct {
	// Name is the member's --node-id (the peer label: one series per
	// member, so the count stays the cluster's size).
	Name string
	// LastContact is how long ago this node last heard from it; negative:
	// never since this node started.
	LastContact float64
	// Match is the highest log index the leader knows is in its log and
	// Active whether the leader heard from it within an election timeout;
	// both only when Leading.
	Match   uint64
	Active  bool
	Leading bool
}

// RaftStatus is what the raft gauges show.
type RaftStatus struct{ Term, Commit, Applied, LeaderChanges uint64 }

// NewServer creates the server collectors and registers them on reg.
func NewServer(reg prometheus.Registerer, g Gauges) *Server {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "fence", Name: name, Help: help})
	}
	m := &Server{
		Grants:      counter("grants_total", "Locks granted (each with a new fencing token), directly or to a waiter."),
		Releases:    counter("releases_total", "Locks released by their holder, by revoke or by expiry."),
		Expirations: counter("lease_expirations_total", "Leases ended because they were not renewed in time."),
		Revocations: counter("lease_revocations_total", "Leases ended by their holder."),
		Renewals:    counter("renewals_total", "Lease renewals committed."),
		LockDelayRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fence", Name: "lock_delay_refusals_total",
			Help: "Try-acquires refused because the lock was in lock-delay after an expiry, by lock-name prefix."}, []string{"prefix"}),
		StaleWrites: counter("stale_writes_total", "Fenced key-value writes refused for a stale token."),
		ApplyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "fence", Name: "raft_apply_seconds",
			Help:    "Time from proposing a batch of commands to raft until it is committed and applied.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "fence", Name: "raft_batch_commands",
			Help:    "Commands packed into one raft log entry.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		AuthDenied: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fence", Name: "auth_denied_total",
			Help: "Calls refused by the policy (--policy-file), by gRPC code: Unauthenticated (no identity) or PermissionDenied."}, []string{"code"}),
		RenewalsFailed: counter("renewals_failed_total", "Lease renewals that arrived after their lease had ended (expired or revoked): the holder was alive but too late."),
		HoldSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fence", Name: "lock_hold_seconds",
			Help:    "How long each grant was held, observed when it ended, by cause (released, expired, revoked, force-released) and lock-name prefix; measured on the log's clock (its ticks), so to a tick.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 16)}, []string{"cause", "prefix"}),
		HoldTTLRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fence", Name: "lock_hold_ttl_ratio",
			Help:    "Each grant's hold time divided by its lease's TTL, observed when it ended, by cause (released, expired, revoked, force-released) and lock-name prefix.",
			Buckets: HoldRatioBuckets}, []string{"cause", "prefix"}),
		WaitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fence", Name: "lock_wait_seconds",
			Help:    "How long each queued acquire waited before its grant, by lock-name prefix; on the log's clock, so to a tick (acquires granted at once are not observed).",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 16)}, []string{"prefix"}),
		ExpiredHeld: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fence", Name: "lock_expirations_total",
			Help: "Grants ended because their holder's lease expired while it held them, by lock-name prefix."}, []string{"prefix"}),
		RenewalSlack: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "fence", Name: "renewal_slack_seconds",
			Help:    "How much of its lease each committed renewal left: the lease's deadline minus the renewal's apply, on the log's clock (0 or less: overdue).",
			Buckets: SlackBuckets}),
	}
	if g.Prefixes == (PrefixConfig{}) {
		g.Prefixes = DefaultPrefixConfig()
	}
	m.prefixes = newPrefixes(m, g.Prefixes)
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "fence", Name: name, Help: help}, f)
	}
	reg.MustRegister(m.Grants, m.Releases, m.Expirations, m.Revocations, m.Renewals,
		m.LockDelayRefused, m.StaleWrites, m.ApplyLatency, m.BatchSize, m.AuthDenied,
		m.RenewalsFailed, m.HoldSeconds, m.HoldTTLRatio, m.WaitSeconds, m.ExpiredHeld, m.RenewalSlack,
		gauge("active_leases", "Live leases.", g.Leases),
		gauge("active_locks", "Locks held, in lock-delay, or waited for.", g.Locks),
		gauge("waiters", "Acquires waiting in lock queues.", g.Waiters),
		gauge("is_leader", "1 when this node is the raft leader and serving.", g.IsLeader),
		buildInfo())
	if g.Raft != nil {
		raft := func(f func(RaftStatus) uint64) func() float64 { return func() float64 { return float64(f(g.Raft())) } }
		reg.MustRegister(
			gauge("raft_term", "The raft term this node is in.", raft(func(r RaftStatus) uint64 { return r.Term })),
			gauge("raft_commit_index", "The highest log index this node knows committed.", raft(func(r RaftStatus) uint64 { return r.Commit })),
			gauge("raft_applied_index", "The highest log index this node has applied.", raft(func(r RaftStatus) uint64 { return r.Applied })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "fence", Name: "raft_leader_changes_total",
				Help: "Times the leader this node knows changed (to another member, or to none) since it started."},
				raft(func(r RaftStatus) uint64 { return r.LeaderChanges })))
	}
	if g.LastToken != nil {
		reg.MustRegister(gauge("last_token", "The last fencing token granted, as this node has applied it (a restore's --token-floor must be at least the largest any member showed).", g.LastToken))
	}
	if g.Peers != nil {
		reg.MustRegister(peerCollector(g.Peers))
	}
	if g.Queues != nil {
		reg.MustRegister(queueCollector{m: m, queue: g.Queues})
	}
	return m
}

var (
	peerLastContact = prometheus.NewDesc("fence_raft_peer_last_contact_seconds",
		"Seconds since this node last heard from the member (absent: never since it started).", []string{"peer"}, nil)
	peerMatch = prometheus.NewDesc("fence_raft_peer_match_index",
		"The highest log index the leader knows is in the member's log (leader only).", []string{"peer"}, nil)
	peerActive = prometheus.NewDesc("fence_raft_peer_active",
		"1 if the leader heard from the member within an election timeout, else 0 (leader only).", []string{"peer"}, nil)
)

// peerCollector reports the per-peer gauges of every other member at each
// scrape.
type peerCollector func() []Peer

func (peerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- peerLastContact
	ch <- peerMatch
	ch <- peerActive
}

func (f peerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range f() {
		if p.LastContact >= 0 {
			ch <- prometheus.MustNewConstMetric(peerLastContact, prometheus.GaugeValue, p.LastContact, p.Name)
		}
		if p.Leading {
			active := 0.0
			if p.Active {
				active = 1
			}
			ch <- prometheus.MustNewConstMetric(peerMatch, prometheus.GaugeValue, float64(p.Match), p.Name)
			ch <- prometheus.MustNewConstMetric(peerActive, prometheus.GaugeValue, active, p.Name)
		}
	}
}

// buildInfo is fence_build_info{version, revision, modified, goversion}, always 1.
func buildInfo() prometheus.Collector {
	i := buildinfo.Get()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "fence", Name: "build_info",
		Help:        "Always 1; its labels say which fence this is (as 'fence version').",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "modified": strconv.FormatBool(i.Modified), "goversion": i.GoVersion}},
		func() float64 { return 1 })
}
