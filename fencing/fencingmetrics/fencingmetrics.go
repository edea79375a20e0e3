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
package fencingmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/fencing"
)

// Observer implements fencing.Observer with a Prometheus counter.
type Observer struct{ stale *prometheus.CounterVec }

// New registers the counter on reg.
func New(reg prometheus.Registerer) *Observer {
	o := &Observer{stale: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencing_stale_writes_total",
		Help: "Writes with a stale fencing token: refused (mode=enforce) or let through by observe mode (mode=observe)."},
		[]string{"table", "mode"})}
	reg.MustRegister(o.stale)
	return o
}

// Stale counts one stale write.
func (o *Observer) Stale(table string, mode fencing.Mode, _, _ fencing.Token) {
	o.stale.WithLabelValues(table, mode.String()).Inc()
}
