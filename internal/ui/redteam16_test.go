package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/policy"
	"github.com/fencehq/fence/internal/server"
)

// TestDashboardForgetsQuietLocks: a page left open on a cluster that
// uses a lock per job (a new name each time) keeps the recent events of a
// bounded number of locks, not of every name it ever saw: 1,500 names
// each taken and released leave at most 1,000 lists of events in the
// page, the latest names' among them, and the page logs no error.
func TestDashboardForgetsQuietLocks(t *testing.T) {
	exe := chromium(t)
	srv := locktest.Start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithInsecure(), client.WithOwner("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tb := openTab(t, exe, "http://"+srv.MetricsAddr()+"/ui/")
	tb.waitFor("the watch to be live", `document.getElementById("live").textContent === "live"`)

	const names, workers = 1500, 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < names; i += workers {
				l, err := cl.TryLock(ctx, fmt.Sprintf("job/%04d", i))
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// One more lock after all the others: its release is the newest event,
	// so it is in the feed whatever order the workers finished in.
	last := "job/last"
	l, err := cl.TryLock(ctx, last)
	if err == nil {
		err = l.Release(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	tb.waitFor("the last job's release in the feed", fmt.Sprintf(`[...document.querySelectorAll("#events li")].some(li => li.textContent.includes(%q))`, last+": released"))
	if n := eval[int](tb, "state.events.size"); n > 1000 {
		t.Fatalf("the page keeps the events of %d locks (of %d names seen): it never forgets a name", n, names)
	}
	if !eval[bool](tb, fmt.Sprintf("state.events.has(%q)", last)) {
		t.Fatalf("the page forgot the events of %s, the latest lock", last)
	}
	tb.noProblems()
}

// TestDashboardWithoutIdentityDoesNotFloodTheAudit: under a policy, a
// page open without an identity is refused each data call, and each
// refusal is counted (fence_auth_denied_total, which operators alert on),
// logged and audited. The page asks once per call, then waits (a minute,
// or a new token), rather than every second for as long as the tab is
// open: over 8 s of the page's own timers, at most one refusal each of
// ListLocks, Members and Watch.
func TestDashboardWithoutIdentityDoesNotFloodTheAudit(t *testing.T) {
	exe := chromium(t)
	certs := locktest.NewCerts(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := fmt.Sprintf("identities:\n  - name: viewer\n    token_sha256: %s\n    prefixes: [jobs/]\n    rights: [read]\n", policy.HashToken("viewer-secret"))
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.PolicyFile, c.MetricsAddr = file, "127.0.0.1:0" })
	tlsCfg, err := pki.ClientTLS(certs.Client)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.Certificates = nil
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	denied := func() int {
		resp, err := hc.Get("https://" + srv.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, `fence_auth_denied_total{code="Unauthenticated"} `); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		return n
	}

	tb := openTab(t, exe, "https://"+srv.MetricsAddr()+"/ui/")
	tb.waitFor("the refusal", `document.getElementById("error").textContent.includes("no identity")`)
	tb.waitFor("8 s of the page's counters", `document.querySelector("#chart-grants polyline").getAttribute("points").split(" ").length >= 8`)
	if n := denied(); n > 3 {
		t.Fatalf("an open page without an identity made %d refused calls in 8 s (each counted, logged and audited); want one each of ListLocks, Members, Watch", n)
	}
	// A token is used at once.
	tb.run(chromedp.SendKeys(chromedp.CSS("#token"), "viewer-secret"), chromedp.Click(chromedp.CSS(`#tokenform button[type="submit"]`)))
	tb.waitFor("the watch to be live", `document.getElementById("live").textContent === "live"`)
	tb.waitFor("the members", `document.querySelectorAll("#mtable tbody tr").length === 1`)
	tb.noProblems()
}

// TestDashboardShowsHostileNamesAsText: lock names, owners and values are
// the callers' strings. Markup in them is shown as text in the table, the
// detail view, the queue and the event feeds: no element is made of it
// and no script runs (the page also forbids inline scripts, but must not
// need that).
func TestDashboardShowsHostileNamesAsText(t *testing.T) {
	exe := chromium(t)
	srv := locktest.Start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = `x/<img src=x onerror="window.pwned=1">`
	const owner = `"><svg onload=window.pwned=2><b id=pwn>`
	dial := func(owner string) *client.Client {
		cl, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithInsecure(), client.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	holder, waiter := dial(owner), dial(`<i>waiter</i>`)
	tb := openTab(t, exe, "http://"+srv.MetricsAddr()+"/ui/")
	tb.waitFor("the watch to be live", `document.getElementById("live").textContent === "live"`)
	if _, err := holder.TryLock(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = waiter.Lock(waitCtx, name) }()
	defer func() { stop(); <-done }()
	tb.waitFor("the row, its name as text", fmt.Sprintf(`[...document.querySelectorAll("#locks td.name")].some(td => td.textContent.startsWith(%q))`, name))
	tb.waitFor("the holder as text", fmt.Sprintf(`[...document.querySelectorAll("#locks td.holder")].some(td => td.textContent === %q)`, owner))
	tb.pick(`#locks td.name`)
	tb.waitFor("the queue, its owner as text", `[...document.querySelectorAll("#dqueue li")].some(li => li.textContent.startsWith("<i>waiter</i>"))`)
	tb.waitFor("the events, as text", fmt.Sprintf(`[...document.querySelectorAll("#events li")].some(li => li.textContent.includes(%q))`, name+": waiter joined"))
	for _, sel := range []string{"img", "svg:not(#charts svg)", "#pwn", "i", "b"} {
		if eval[bool](tb, fmt.Sprintf(`!!document.querySelector(%q)`, "main "+sel)) {
			t.Fatalf("an element %q was made of a caller's string", sel)
		}
	}
	if eval[bool](tb, `window.pwned !== undefined`) {
		t.Fatal("a caller's string ran a script")
	}
	tb.noProblems()
}
