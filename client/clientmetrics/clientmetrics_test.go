package clientmetrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/client/clientmetrics"
)

func TestObserverCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := clientmetrics.New(reg)
	o.RenewalSent(true)
	o.RenewalSent(true)
	o.RenewalSent(false)
	o.LeaseLost(fmt.Errorf("%w: %w", client.ErrExpired, client.ErrLostContact))
	o.LeaseLost(client.ErrExpired)
	o.AcquireWait(3*time.Millisecond, true)
	want := `
# HELP fence_client_renewals_total Lease renewals sent, by result (ok, failed).
# TYPE fence_client_renewals_total counter
fence_client_renewals_total{result="failed"} 1
fence_client_renewals_total{result="ok"} 2
# HELP fence_client_leases_lost_total Leases that ended without being released, by reason (expired, lost_contact).
# TYPE fence_client_leases_lost_total counter
fence_client_leases_lost_total{reason="expired"} 1
fence_client_leases_lost_total{reason="lost_contact"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fence_client_renewals_total", "fence_client_leases_lost_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "fence_client_acquire_wait_seconds"); n != 1 {
		t.Fatalf("acquire wait series: %d", n)
	}
}
