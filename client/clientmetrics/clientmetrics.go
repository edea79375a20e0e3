// Package clientmetrics exports a fence client's events as Prometheus
// metrics. It lives apart from package client so that programs that do not
// use Prometheus do not import it.
//
//	reg := prometheus.NewRegistry()
//	c, err := client.Dial(ctx, addrs, client.WithObserver(clientmetrics.New(reg)))
//
// A rise in fence_client_renewal_failures_total means renewals are not
// reaching the server in time: the network or the server is struggling, or
// the TTL is too short for the pauses this process has. Each failure puts the
// lease in jeopardy; when failures last a whole TTL the lease is lost
// (fence_client_leases_lost_total).
package clientmetrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/client"
)

// Observer implements client.Observer with Prometheus collectors.
type Observer struct {
	renewals *prometheus.CounterVec
	lost     *prometheus.CounterVec
	wait     *prometheus.HistogramVec
}

// New registers the client collectors on reg and returns the observer.
func New(reg prometheus.Registerer) *Observer {
	o := &Observer{
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fence", Subsystem: "client",
			Name: "renewals_total", Help: "Lease renewals sent, by result (ok, failed)."}, []string{"result"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fence", Subsystem: "client",
			Name: "leases_lost_total", Help: "Leases that ended without being released, by reason (expired, lost_contact)."}, []string{"reason"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fence", Subsystem: "client",
			Name: "acquire_wait_seconds", Help: "Time Lock and TryLock calls took, by outcome (granted, not_granted).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 12)}, []string{"outcome"}),
	}
	reg.MustRegister(o.renewals, o.lost, o.wait)
	return o
}

// RenewalSent counts a renewal.
func (o *Observer) RenewalSent(ok bool) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	o.renewals.WithLabelValues(result).Inc()
}

// LeaseLost counts a lost lease.
func (o *Observer) LeaseLost(reason error) {
	label := "expired"
	if errors.Is(reason, client.ErrLostContact) {
		label = "lost_contact"
	}
	o.lost.WithLabelValues(label).Inc()
}

// AcquireWait records how long an acquire took.
func (o *Observer) AcquireWait(d time.Duration, granted bool) {
	outcome := "granted"
	if !granted {
		outcome = "not_granted"
	}
	o.wait.WithLabelValues(outcome).Observe(d.Seconds())
}
