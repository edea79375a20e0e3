package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// guideFlags are the guide's assumptions for its nightly job: "99 of 100
// runs end within 20 seconds. The slowest 1 in 100 takes 90 seconds", 1,000
// restaurants, 1,000 holders, a row that checks the token.
var guideFlags = []string{"advise", "--p99", "20s", "--max-run", "90s", "--runs-per-day", "1000", "--holders", "1000", "--target-checks-token"}

// field matches one row of the report's figures: name, then value.
func field(t *testing.T, out, name, value string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + ` +` + regexp.QuoteMeta(value) + `( |$)`).MatchString(out) {
		t.Errorf("no row %q = %q in:\n%s", name, value, out)
	}
}

// TestAdviseGuide: the guide's assumptions in, the guide's numbers out.
func TestAdviseGuide(t *testing.T) {
	code, out, errOut := fenceArgs(t, guideFlags...)
	if code != 0 {
		t.Fatalf("advise: %d %s", code, errOut)
	}
	if !strings.HasPrefix(out, "level: lease + fencing token\n") {
		t.Errorf("level:\n%s", out)
	}
	field(t, out, "TTL", "30s")                                          // "I would use a 30-second lease,
	field(t, out, "renew every", "10s")                                  // renewed every 10 seconds"
	field(t, out, "renewals per second", "100")                          // "1,000 / 10 = 100 renewals per second"
	field(t, out, "worst wait after a crash", "30s")                     // "A 30-second lease waits 30 seconds.
	if !strings.Contains(out, "a 10m0s lease waits 600 s, 20× longer") { // A 10-minute lease waits 600 seconds, which is 20 times longer"
		t.Errorf("no 600 s vs 30 s comparison:\n%s", out)
	}
	field(t, out, "lease expiries a day without renewal", "10") // "1% of 1,000 restaurants is 10 runs a night"
	field(t, out, "grants at risk in a failover", "20")         // "50 x 0.4 = 20 grants may not be copied"
	if !strings.Contains(out, "a token counter on an asynchronous follower can repeat after a failover") {
		t.Errorf("no warning about counters on asynchronous followers:\n%s", out)
	}

	// "5,000,000 / 10,000 = 500 runs a day [...] up to 500 bad writes a day are stopped."
	args := append(append([]string{}, guideFlags...), "--runs-per-day", "5000000", "--json")
	code, out, errOut = fenceArgs(t, args...)
	var got adviseJSON
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Advice == nil || got.Metrics != nil {
		t.Fatalf("advise --json: %d %s %s", code, out, errOut)
	}
	a := got.Advice
	want := adviceJSON{Level: "lease + fencing token", TTLSeconds: 30, RenewSeconds: 10, RenewalsPerSecond: 100, CrashWaitSeconds: 30,
		CompareTTLSeconds: 600, CompareWaitRatio: 20, SlowRunShare: 0.01, ExpiriesWithoutRenewal: 50000, OverlapsPerDay: 500,
		BadWritesWithoutToken: 500, BadWritesWithToken: 0, StaleWritesStopped: 500, GrantsAtRisk: 20}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"ttl", a.TTLSeconds, want.TTLSeconds}, {"renew", a.RenewSeconds, want.RenewSeconds},
		{"renewals/s", a.RenewalsPerSecond, want.RenewalsPerSecond}, {"crash wait", a.CrashWaitSeconds, want.CrashWaitSeconds},
		{"compare ttl", a.CompareTTLSeconds, want.CompareTTLSeconds}, {"ratio", a.CompareWaitRatio, want.CompareWaitRatio},
		{"slow share", a.SlowRunShare, want.SlowRunShare}, {"expiries", a.ExpiriesWithoutRenewal, want.ExpiriesWithoutRenewal},
		{"overlaps", a.OverlapsPerDay, want.OverlapsPerDay}, {"bad without", a.BadWritesWithoutToken, want.BadWritesWithoutToken},
		{"bad with", a.BadWritesWithToken, want.BadWritesWithToken}, {"stopped", a.StaleWritesStopped, want.StaleWritesStopped},
		{"at risk", a.GrantsAtRisk, want.GrantsAtRisk},
	} {
		if d := c.got - c.want; d > 1e-9*max(1, c.want) || -d > 1e-9*max(1, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if a.Level != want.Level || len(a.Reasons) == 0 || len(a.Warnings) == 0 {
		t.Errorf("level %q reasons %q warnings %q", a.Level, a.Reasons, a.Warnings)
	}
}

func TestAdviseLevels(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		level string
	}{
		{[]string{"--p99", "50ms", "--max-run", "200ms", "--one-database"}, "plain lock"},
		{[]string{"--p99", "2s", "--max-run", "20s", "--double-run-only-wastes-work"}, "lease"},
		{[]string{"--p99", "2s", "--max-run", "20s"}, "lease + fencing token"},
	} {
		args := append(append([]string{"advise", "--runs-per-day", "100", "--holders", "3"}, tc.args...), "--pause-rate", "0.01%")
		if code, out, errOut := fenceArgs(t, args...); code != 0 || !strings.HasPrefix(out, "level: "+tc.level+"\n") {
			t.Errorf("%q: %d\n%s%s", tc.args, code, out, errOut)
		}
	}
}

// TestAdviseBadInput: nonsense is refused with exit 2 and says what is
// wrong.
func TestAdviseBadInput(t *testing.T) {
	job := []string{"advise", "--p99", "2s", "--max-run", "20s", "--runs-per-day", "100", "--holders", "3"}
	with := func(extra ...string) []string { return append(append([]string{}, job...), extra...) }
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"p99 above max", with("--p99", "30s"), "p99 run time 30s is above the max run time 20s"},
		{"zero p99", with("--p99", "0s"), "p99 run time 0s: must be positive"},
		{"negative max", with("--max-run", "-1s"), "--max-run -1s: a duration cannot be negative"},
		{"no runs", with("--runs-per-day", "0"), "runs per day 0: must be at least 1"},
		{"negative holders", with("--holders", "-2"), "holders -2: must be at least 1"},
		{"pause rate above 1", with("--pause-rate", "3/2"), "pause rate 1.5: must be a share of runs"},
		{"pause rate not a number", with("--pause-rate", "often"), `--pause-rate "often": not a share of runs`},
		{"pause rate over zero", with("--pause-rate", "1/0"), "division by zero"},
		{"negative grant rate", with("--grant-rate", "-5"), "grant rate -5"},
		{"zero compare", with("--compare-ttl", "0s"), "--compare-ttl 0s: must be positive"},
		{"missing figures", []string{"advise", "--p99", "2s"}, "missing --max-run, --runs-per-day, --holders: the job's own figures have no default"},
		{"a server flag", with("--server", "127.0.0.1:7300"), "--server is for commands that call a server"},
		{"an argument", with("extra"), "unknown command \"extra\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := fenceArgs(t, tc.args...)
			if code != ExitUsage || !strings.Contains(errOut, tc.msg) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d with %q", code, out, errOut, ExitUsage, tc.msg)
			}
		})
	}
}

// TestAdvisePrompts: on a terminal, advise asks for what its flags leave
// out (prompts on stderr, so --json stays clean), and asks again after a
// bad answer.
func TestAdvisePrompts(t *testing.T) {
	old := stdinIsTerminal
	stdinIsTerminal = func(io.Reader) bool { return true }
	t.Cleanup(func() { stdinIsTerminal = old })
	answers := "20s\nsoon\n90s\n1000\n1000\nn\ny\nno\n"
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"advise", "--json"}, strings.NewReader(answers), &out, &errb)
	var got adviseJSON
	if code != 0 || json.Unmarshal(out.Bytes(), &got) != nil || got.Advice == nil {
		t.Fatalf("%d %s %s", code, out.String(), errb.String())
	}
	if got.Advice.Level != "lease + fencing token" || got.Advice.TTLSeconds != 30 || got.Advice.RenewalsPerSecond != 100 {
		t.Errorf("advice from the answers: %+v", got.Advice)
	}
	if !strings.Contains(errb.String(), "the slowest run's time (e.g. 90s)? ") || !strings.Contains(errb.String(), `invalid argument "soon" for "--max-run" flag`) ||
		!strings.Contains(errb.String(), "(a row or API you own; not an SMS or payment provider) (y/n)? ") {
		t.Errorf("prompts:\n%s", errb.String())
	}
	// Every job figure given: no questions, even on a terminal.
	out.Reset()
	errb.Reset()
	if code := Run(context.Background(), guideFlags, strings.NewReader(""), &out, &errb); code != 0 || errb.Len() != 0 || !strings.HasPrefix(out.String(), "level: ") {
		t.Errorf("all flags on a terminal: %d %q %q", code, out.String(), errb.String())
	}
	// Answers that run out are bad usage, not a hang.
	out.Reset()
	errb.Reset()
	if code := Run(context.Background(), []string{"advise"}, strings.NewReader("20s\n"), &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), "no answer for --max-run") {
		t.Errorf("answers ran out: %d %s", code, errb.String())
	}
}

// metricsServer starts a plaintext server with a metrics port and short
// TTLs allowed, and a client of it.
func metricsServer(t *testing.T) (*server.Server, *client.Client) {
	t.Helper()
	srv := locktest.Start(t, func(c *server.Config) { c.MetricsAddr, c.MinTTL = "127.0.0.1:0", 200*time.Millisecond })
	c, err := client.Dial(context.Background(), []string{srv.GRPCAddr()}, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// TestAdviseMetricsTooLong: holders that let go at once under 1-minute
// leases: the verdict is too long, with a TTL that fits the holds.
func TestAdviseMetricsTooLong(t *testing.T) {
	srv, c := metricsServer(t)
	ctx := context.Background()
	for i := range 12 {
		d, err := c.LockDetached(ctx, fmt.Sprintf("jobs/quick-%d", i), time.Minute, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.UnlockDetached(ctx, d.Secret); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := fenceArgs(t, "advise", "--insecure", "--metrics", srv.MetricsAddr())
	if code != 0 || !strings.HasPrefix(out, "leases: too long\n") || !strings.Contains(out, "a TTL of 1s") {
		t.Fatalf("advise --metrics: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = fenceArgs(t, "advise", "--metrics", "http://"+srv.MetricsAddr()+"/metrics", "--json")
	var got adviseJSON
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Advice != nil || got.Metrics == nil {
		t.Fatalf("--json: %d %s", code, out)
	}
	if m := got.Metrics; m.Verdict != "too long" || m.Grants != 12 || m.HoldP99TTLRatio == nil || *m.HoldP99TTLRatio > 0.2 || m.SuggestedTTLSeconds == nil {
		t.Errorf("--json metrics: %+v", m)
	}
}

// TestAdviseMetricsTooShort: a lease that ran out under its holder, the
// holder's late renewal, and its stale write: the verdict is too short,
// and each sign is named.
func TestAdviseMetricsTooShort(t *testing.T) {
	srv, c := metricsServer(t)
	ctx := context.Background()
	old, err := c.LockDetached(ctx, "totals/77", 300*time.Millisecond, false, client.WithLockDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	// The holder pauses: its lease runs out, and another takes the lock.
	next, err := c.LockDetached(ctx, "totals/77", time.Minute, true, client.WithLockDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= old.Token {
		t.Fatalf("tokens %d then %d", old.Token, next.Token)
	}
	// It wakes up and renews, too late.
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := api.NewFenceServiceClient(conn).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := hex.DecodeString(old.Secret)
	if err := stream.Send(&api.KeepAliveRequest{LeaseSecret: secret, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.Ok {
		t.Fatalf("late renewal: %v %v", resp, err)
	}
	// The new holder writes, then the old one does: refused.
	if err := c.Put(ctx, "totals/77", []byte("42000"), next.Token); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "totals/77", []byte("41000"), old.Token); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("stale put: %v", err)
	}
	code, out, errOut := fenceArgs(t, "advise", "--insecure", "--metrics", srv.MetricsAddr())
	if code != 0 || !strings.HasPrefix(out, "leases: too short\n") {
		t.Fatalf("advise --metrics: %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"1 renewals arrived after their lease had ended", "1 stale writes were refused", "(grants 2, renewals 0, failed renewals 1, expirations 1, stale writes refused 1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestAdviseMetricsScrape: a port that refuses is an error; the metrics
// port speaks TLS like the others, with the client commands' files; a
// job's figures with --metrics give both reports.
func TestAdviseMetricsScrape(t *testing.T) {
	code, _, errOut := fenceArgs(t, "advise", "--insecure", "--metrics", closedPort(t))
	if code != ExitError || !strings.Contains(errOut, "fence: --metrics: ") {
		t.Fatalf("%d %s", code, errOut)
	}
	certs := locktest.NewCerts(t)
	tlsSrv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	tlsFlags := []string{"--ca", certs.Client.CA, "--cert", certs.Client.Cert, "--key", certs.Client.Key}
	code, out, errOut := fenceArgs(t, append([]string{"advise", "--metrics", tlsSrv.MetricsAddr()}, tlsFlags...)...)
	if code != 0 || !strings.HasPrefix(out, "leases: not enough data\n") {
		t.Fatalf("TLS metrics: %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := fenceArgs(t, "advise", "--insecure", "--metrics", tlsSrv.MetricsAddr()); code != ExitError || !strings.Contains(errOut, "--metrics") {
		t.Fatalf("plaintext to the TLS metrics port: %d %s", code, errOut)
	}
	// A job's figures with --metrics: both reports.
	srv, _ := metricsServer(t)
	code, out, errOut = fenceArgs(t, append(append([]string{}, guideFlags...), "--insecure", "--metrics", srv.MetricsAddr())...)
	if code != 0 || !strings.HasPrefix(out, "level: lease + fencing token\n") || !strings.Contains(out, "\nleases: not enough data\n") {
		t.Fatalf("%d\n%s%s", code, out, errOut)
	}
}
