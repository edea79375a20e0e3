// Package fencingmetrics counts fencing's stale writes in Prometheus. It lives
// apart from package fencing so that programs without Prometheus do not
// import it.
//
//	obs := fencingmetrics.New(reg)
//	totals, _ := fencing.NewTable(fencing.TableConfig{..., Observer: obs})
//
// fencing_stale_writes_total{table, mode="enforce"} counts refused writes;
// {mode="observe"} counts writes observe mode let through that enforce mode
// would have refused — the number to watch before switching to enforce.
// fencing_refused_writes_total{table, mode, reason} counts the same for
// tokens refused for what they are: reason="too_high" (above the Limit) or
// "bad_signature" (a signed token refused, or a plain one where a signed one
// is required).
package fencingmetrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/fencing"
)

// Observer implements fencing.RefusalObserver with Prometheus counters.
type Observer struct{ stale, refused *prometheus.CounterVec }

// New registers the counters on reg.
func New(reg prometheus.Registerer) *Observer {
	o := &Observer{
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencing_stale_writes_total",
			Help: "Writes with a stale fencing token: refused (mode=enforce) or let through by observe mode (mode=observe)."},
			[]string{"table", "mode"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencing_refused_writes_total",
			Help: "Writes whose token was refused for what it is (reason=too_high: above the limit; bad_signature: a refused or missing signed token): refused (mode=enforce) or let through by observe mode."},
			[]string{"table", "mode", "reason"}),
	}
	reg.MustRegister(o.stale, o.refused)
	return o
}

// Refused counts one write refused for its token's validity.
func (o *Observer) Refused(table string, mode fencing.Mode, err error) {
	reason := "other"
	switch {
	case errors.Is(err, fencing.ErrTooHigh):
		reason = "too_high"
	case errors.Is(err, fencing.ErrBadSignature):
		reason = "bad_signature"
	}
	o.refused.WithLabelValues(table, mode.String(), reason).Inc()
}

// Stale counts one stale write.
func (o *Observer) Stale(table string, mode fencing.Mode, _, _ fencing.Token) {
	o.stale.WithLabelValues(table, mode.String()).Inc()
}
