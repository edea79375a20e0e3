// Package advise is the decision guide "Lease vs lock vs fencing token"
// (the project's background/000) as arithmetic: a pure function from what a
// team knows about its job to the level of safety it needs and the numbers
// behind it. 'fence advise' is its command line.
//
// # Basics
//
// [Advise] takes [Inputs] (run times, pause rate, runs per day, holders,
// the three yes/no questions, failover copy delay and grant rate) and
// returns an [Advice]: the [Level], the reasons for it, the TTL and renewal
// interval, renewals per second, the worst wait after a crash, overlaps per
// day without and with a token, and the grants at risk in a failover.
// [Inputs.Validate] refuses nonsense first.
//
// [Judge] reads the metrics of a running server ([Observed], from
// [ParseMetrics]) and says whether its leases look too short or too long.
//
// # Caveats
//
// The guide's numbers are assumptions for teaching; so is every default
// here that comes from them (a pause rate of 1 in 10,000, a 0.4 s copy
// delay, 50 grants/s, the 10-minute lease the wait is compared with). The
// guide knows a job's run times by two points only, the p99 and the
// slowest run, so the share of runs longer than a TTL is known only as far
// as those two points tell: 0 above the slowest run, 1 in 100 between the
// two, at least 1 in 100 below the p99.
package advise
