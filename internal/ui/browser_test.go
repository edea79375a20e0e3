package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/policy"
	"github.com/fencehq/fence/internal/server"
)

// chromium finds the browser: $FENCE_CHROMIUM, else chromium or
// chromium-browser on PATH. Without one the test is skipped, unless
// FENCE_REQUIRE_BROWSER=1 (CI), where it fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FENCE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("FENCE_REQUIRE_BROWSER") == "1" {
		t.Fatal("FENCE_REQUIRE_BROWSER=1 but no chromium on PATH: apt-get install chromium (.ci/run does)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium); FENCE_REQUIRE_BROWSER=1 makes this a failure")
	return ""
}

// artifacts is where the screenshots go: $FENCE_ARTIFACTS/ui, else
// test/artifacts/ui in the repository (gitignored).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "test", "artifacts", "ui")
	if a := os.Getenv("FENCE_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "ui")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// page is one browser tab on the dashboard, with what it logged.
type tab struct {
	t   *testing.T
	ctx context.Context
	mu  sync.Mutex
	bad []string // console errors and warnings, uncaught exceptions
	// dialog is the text of the last confirm dialog, which is accepted.
	dialog string
}

func openTab(t *testing.T, exe, url string) *tab {
	t.Helper()
	alloc, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.IgnoreCertErrors, // (a test CA) chromedp.WindowSize(1440, 1000),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	t.Cleanup(cancel)
	tb := &tab{t: t}
	// The listener runs on the tab's reading goroutine: it records and
	// returns (the dialog is answered from another goroutine).
	listen := func(ev any) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			switch ev.Type {
			case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeWarning, runtime.ConsoleAPICalledTypeAssert:
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				tb.bad = append(tb.bad, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tb.bad = append(tb.bad, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		case *page.EventJavascriptDialogOpening:
			tb.dialog = ev.Message
			go chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(listen))
	t.Cleanup(cancel)
	tb.ctx = ctx
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline (one would end it)
		t.Fatal(err)
	}
	tb.run(chromedp.EmulateViewport(1440, 1000), chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#locks")))
	return tb
}

func (tb *tab) run(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression of type T.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// pick presses the pointer on the table row cell selector finds, and
// press clicks the button it finds, in the page itself, retrying until
// there is one: the page redraws its tables on every change, so a node
// chromedp found may be gone by the time it clicks it (the page selects a
// row on pointerdown for the same reason).
func (tb *tab) pick(selector string) {
	tb.t.Helper()
	tb.inPage(selector, `e.dispatchEvent(new PointerEvent("pointerdown", {bubbles: true}))`)
}

func (tb *tab) press(selector string) {
	tb.t.Helper()
	tb.inPage(selector, `e.click()`)
}

// inPage runs the JavaScript statement do on the element e that selector
// finds, once there is one.
func (tb *tab) inPage(selector, do string) {
	tb.t.Helper()
	q, _ := json.Marshal(selector)
	tb.waitFor(selector, `(() => { const e = document.querySelector(`+string(q)+`); if (!e) return false; `+do+`; return true })()`)
}

// waitFor polls expr (JavaScript, true when done) every 20 ms for up to
// 15 s, and returns how long it took.
func (tb *tab) waitFor(what, expr string) time.Duration {
	tb.t.Helper()
	start := time.Now()
	for {
		if eval[bool](tb, "!!("+expr+")") {
			return time.Since(start)
		}
		if time.Since(start) > 15*time.Second {
			tb.screenshot("failed.png")
			tb.t.Fatalf("waited 15s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return eval[string](tb, fmt.Sprintf(`(document.querySelector(%q) || {textContent: ""}).textContent`, sel))
}

func (tb *tab) screenshot(name string) string {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatal(err)
	}
	path := filepath.Join(artifacts(tb.t), name)

	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("screenshot: %s", path)
	return path
}

// noProblems fails the test if the page has logged a console error or
// thrown an exception so far.
func (tb *tab) noProblems() {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.bad) > 0 {
		tb.t.Fatalf("the page logged errors:\n%s", strings.Join(tb.bad, "\n"))
	}
}

// row is a JavaScript expression for the table row of lock name.
func row(name string) string {
	return fmt.Sprintf(`document.querySelector('#locks tr[data-name=%q]')`, name)
}

// TestDashboardInBrowser loads /ui in headless Chromium against a real
// 3-member cluster: a grant shows within a second with its token, an
// expired lease's lock goes, the table under load and a lock's detail
// (queue in order, events) are drawn and saved as screenshots, an admin
// force-releases through the confirm dialog, a leadership transfer shows
// in the leader field, and the page logs no error.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	c := locktest.NewCluster(t, 3, func(cfg *server.Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	leader := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	dial := func(owner string) *client.Client {
		cl, err := client.Dial(ctx, c.Addrs(), client.WithInsecure(), client.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	tb := openTab(t, exe, "http://"+leader.Server.MetricsAddr()+"/ui/")
	tb.waitFor("the watch to be live", `document.getElementById("live").textContent === "live"`)
	if got := tb.text("#leader"); got != leader.ID {
		t.Fatalf("leader field %q, want %q", got, leader.ID)
	}

	// A grant shows within a second, with its token.
	app := dial("billing-app")
	l, err := app.TryLock(ctx, "jobs/report", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took := tb.waitFor("jobs/report's row", row("jobs/report"))
	tok := fmt.Sprint(l.Token())
	tb.waitFor("its token", fmt.Sprintf(`%s.querySelector(".token").textContent === %q`, row("jobs/report"), tok))
	t.Logf("the grant showed %v after TryLock returned", took.Round(time.Millisecond))
	if took > time.Second {
		t.Fatalf("the grant took %v to show; want within 1s", took)
	}
	if got := tb.text(`#locks tr[data-name="jobs/report"] .holder`); got != "billing-app" {
		t.Fatalf("holder %q, want billing-app", got)
	}

	// A lease that is not renewed expires, and its lock goes.
	d, err := app.LockDetached(ctx, "jobs/expiring", time.Second, false, client.WithLockDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	tb.waitFor("jobs/expiring's row", row("jobs/expiring"))
	tb.waitFor("jobs/expiring to go when its lease expires", "!"+row("jobs/expiring"))
	tb.waitFor("the expiry in the feed", fmt.Sprintf(`[...document.querySelectorAll("#events li")].some(li => li.textContent.includes("jobs/expiring: released (expired)") && li.textContent.includes("token %d"))`, d.Token))

	// Load: 60 locks, a semaphore with two holders, and waiters.
	holders := []*client.Client{dial("worker-a"), dial("worker-b"), dial("worker-c")}
	for i := range 60 {
		if _, err := holders[i%3].TryLock(ctx, fmt.Sprintf("load/shard-%02d", i), client.WithTTL(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range holders[:2] {
		if _, err := h.Semaphore("load/pool", 4).TryAcquire(ctx, client.WithTTL(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	var waiting sync.WaitGroup
	defer func() { stopWaiting(); waiting.Wait() }()
	wait := func(name, owner string) {
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			_, _ = app.LockDetached(waitCtx, name, 30*time.Second, true, client.WithOwner(owner))
		}()
	}
	wait("load/shard-00", "waiter-1")
	tb.waitFor("the first waiter", row("load/shard-00")+`.querySelector(".waiters").textContent === "1"`)
	wait("load/shard-00", "waiter-2")
	tb.waitFor("the second waiter", row("load/shard-00")+`.querySelector(".waiters").textContent === "2"`)
	wait("load/shard-00", "waiter-3")
	wait("load/shard-07", "waiter-4")
	tb.waitFor("62 locks", `document.querySelectorAll("#locks tbody tr").length === 62`)
	tb.waitFor("the waiters", row("load/shard-00")+`.querySelector(".waiters").textContent === "3" && `+row("load/shard-07")+`.querySelector(".waiters").textContent === "1"`)
	tb.waitFor("the semaphore's two holders", row("load/pool")+`.querySelectorAll(".holder .line").length === 2 && `+row("load/pool")+`.textContent.includes("semaphore 2/4")`)
	tb.waitFor("six samples in the charts", `document.querySelector("#chart-grants polyline").getAttribute("points").split(" ").length >= 6`)
	tb.screenshot("lock-table-under-load.png")

	// The filter keeps the names under a prefix.
	tb.run(chromedp.SendKeys(chromedp.CSS("#filter"), "load/shard-0"))
	tb.waitFor("the filter", `document.querySelectorAll("#locks tbody tr").length === 10`)

	// A lock's detail: its queue in order, its events; the caller (on
	// loopback, no admin token) may force-release.
	tb.pick(`#locks tr[data-name="load/shard-00"] td.name`)
	tb.waitFor("the detail view", `!document.getElementById("detail").hidden && document.getElementById("dname").textContent === "load/shard-00"`)
	tb.waitFor("the queue in order", `[...document.querySelectorAll("#dqueue li")].map(li => li.textContent.split(" ")[0]).join(",") === "waiter-1,waiter-2,waiter-3"`)
	tb.waitFor("the waiters' events", `[...document.querySelectorAll("#devents li")].filter(li => li.textContent.includes("waiter joined")).length === 3`)
	tb.waitFor("the force-release button", `document.querySelector("#dgrants button.force")`)
	tb.screenshot("lock-detail.png")

	oldToken := eval[string](tb, `document.querySelector("#dgrants button.force").dataset.token`)
	tb.press("#dgrants button.force")
	tb.waitFor("the grant to pass to waiter-1", `[...document.querySelectorAll("#dgrants td.holder")].some(td => td.textContent === "waiter-1")`)
	tb.mu.Lock()
	dialog := tb.dialog
	tb.mu.Unlock()
	for _, want := range []string{`"load/shard-00"`, "holder: worker-a", "token: " + oldToken} {
		if !strings.Contains(dialog, want) {
			t.Fatalf("the confirm dialog %q does not name %s", dialog, want)
		}
	}
	tb.waitFor("the force-release in the events", `[...document.querySelectorAll("#devents li")].some(li => li.textContent.includes("released (force released) worker-a") && li.textContent.includes("token `+oldToken+`"))`)

	// Leadership moves: the leader field follows.
	if tb.text(fmt.Sprintf(`#mtable tr[data-id=%q] .role`, leader.ID)) != "leader" {
		t.Fatalf("members table: %s is not shown as the leader", leader.ID)
	}
	var next *locktest.Node
	for _, n := range c.Nodes {
		if n != leader {
			next = n
			break
		}
	}
	if _, err := app.TransferLeader(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
	tb.waitFor("the leader field to change", fmt.Sprintf(`document.getElementById("leader").textContent === %q`, next.ID))
	tb.waitFor("the members note to name the new leader", fmt.Sprintf(`document.getElementById("mnote").textContent.includes("follows %s")`, next.ID))

	tb.noProblems()
}

// TestDashboardUnderPolicy: on a TLS node under a policy the page shows
// nothing without an identity; with a reader's token (pasted into the
// page) it shows that reader's names only and no force-release button;
// with an admin's token the button appears. The page logs no error.
func TestDashboardUnderPolicy(t *testing.T) {
	exe := chromium(t)
	certs := locktest.NewCerts(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := fmt.Sprintf(`identities:
  - name: viewer
    token_sha256: %s
    prefixes: [jobs/]
    rights: [read]
  - name: ops
    token_sha256: %s
    prefixes: [""]
    rights: [acquire, read, admin]
`, policy.HashToken("viewer-secret"), policy.HashToken("ops-secret"))
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.PolicyFile, c.MetricsAddr = file, "127.0.0.1:0" })
	tlsCfg, err := pki.ClientTLS(certs.Client)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.Certificates = nil // the token identifies
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ops, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithTLS(tlsCfg), client.WithToken("ops-secret"), client.WithOwner("ops"))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	for _, name := range []string{"jobs/nightly", "secret/payroll"} {
		if _, err := ops.TryLock(ctx, name); err != nil {
			t.Fatal(err)
		}
	}

	tb := openTab(t, exe, "https://"+srv.MetricsAddr()+"/ui/")
	tb.waitFor("the refusal", `document.getElementById("error").textContent.includes("no identity")`)
	if n := eval[int](tb, `document.querySelectorAll("#locks tbody tr").length`); n != 0 {
		t.Fatalf("without an identity the table shows %d locks", n)
	}
	useToken := func(tok string) {
		tb.run(chromedp.SendKeys(chromedp.CSS("#token"), tok), chromedp.Click(chromedp.CSS(`#tokenform button[type="submit"]`)))
	}

	useToken("viewer-secret")
	tb.waitFor("the watch to be live", `document.getElementById("live").textContent === "live"`)
	tb.waitFor("the viewer's lock", row("jobs/nightly"))
	if eval[bool](tb, "!!"+row("secret/payroll")) {
		t.Fatal("the viewer sees secret/payroll, outside its prefix")
	}
	tb.pick(`#locks tr[data-name="jobs/nightly"] td.name`)
	tb.waitFor("the server's answer about force-release", `document.getElementById("detail").dataset.may === "false"`)
	if eval[bool](tb, `!!document.querySelector("#dgrants button.force")`) {
		t.Fatal("the viewer is shown a force-release button")
	}

	useToken("ops-secret")
	tb.waitFor("the admin's view of secret/payroll", row("secret/payroll"))
	tb.pick(`#locks tr[data-name="jobs/nightly"] td.name`)
	tb.waitFor("the force-release button for the admin", `document.getElementById("detail").dataset.may === "true" && document.querySelector("#dgrants button.force")`)
	tb.noProblems()
}
