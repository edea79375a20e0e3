package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencehq/fence/internal/metrics"
	"github.com/fencehq/fence/internal/policy"
)

// metricsHandler serves /metrics from gather. The per-prefix series (the
// label "prefix") name lock-name prefixes, which the gRPC port shows only
// to callers that may read them: with TLS they go only to a scraper with a
// client certificate of the cluster's CA (as the dashboard's data do), and
// under a policy only the prefixes its identity may read; metrics.NoPrefix
// and metrics.OtherPrefix count names of every prefix and need the read
// right on every name. The other series, and everything on a plaintext
// node, go to anyone.
func (s *Server) metricsHandler(gather prometheus.Gatherer) http.Handler {
	all := promhttp.HandlerFor(gather, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		show := s.prefixesShown(r)
		if show == nil {
			all.ServeHTTP(w, r)
			return
		}
		promhttp.HandlerFor(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
			mfs, err := gather.Gather()
			return withPrefixes(mfs, show), err
		}), promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

// prefixesShown returns which prefix labels the scraper of r may see, or
// nil for all of them.
func (s *Server) prefixesShown(r *http.Request) func(label string) bool {
	if s.tls == nil {
		return nil // plaintext: nothing is authenticated on any port
	}
	none := func(string) bool { return false }
	p := s.policy.Load()
	if p == nil {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			return none
		}
		return nil
	}
	id, admin, err := s.identify(callContext(r.Context(), r), p)
	switch {
	case err != nil:
		return none // no identity: not a refused call (Prometheus often has none)
	case admin:
		return nil
	}
	return func(label string) bool {
		if label == metrics.NoPrefix || label == metrics.OtherPrefix {
			label = ""
		}
		return p.Allows(id, policy.Read, label)
	}
}

// withPrefixes drops from mfs the series whose prefix label show refuses
// (and the families left empty).
func withPrefixes(mfs []*dto.MetricFamily, show func(label string) bool) []*dto.MetricFamily {
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if prefixShown(m, show) {
				kept = append(kept, m)
			}
		}
		mf.Metric = kept
		if len(kept) > 0 {
			out = append(out, mf)
		}
	}
	return out
}

func prefixShown(m *dto.Metric, show func(label string) bool) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == "prefix" {
			return show(l.GetValue())
		}
	}
	return true
}
