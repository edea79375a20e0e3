// Package ui is fence's live dashboard: one page (HTML, CSS and plain
// JavaScript, embedded, no framework, nothing fetched from elsewhere) that
// the server serves on its metrics port at /ui/.
//
// # Basics
//
// Handler serves the page's files. The page reads everything it shows
// from the server's /ui/api/ endpoints (internal/server/ui.go): the lock
// table from ListLocks, a lock's queue from GetLock, the members from
// Members, live changes from Watch as server-sent events, and a few
// counters from /ui/api/stats, sampled every second into small charts.
//
// # Caveats
//
// The page decides nothing: every data call is the gRPC call it stands
// for, judged by the server's interceptor (policy, admin rule). It hides
// the force-release button from a caller the server says may not make
// that call, but the server refuses such a call whatever the page shows.
// ListLocks, GetLock and Members are answered by the leader only: a page
// opened on a follower shows the leader's name and address instead.
package ui
