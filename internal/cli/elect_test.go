package cli

import (
	"strings"
	"testing"
)

// TestElectRunsWhileLeading: fence elect runs its command with the term's
// token and value and resigns when it ends; an observer prints each leader
// in token order.
func TestElectRunsWhileLeading(t *testing.T) {
	addr := startServer(t)
	out, stop := background(t, addr, "elect", "svc", "--observe", "--json")
	for i, want := range []string{"1 10.0.0.1:80 svc", "2 10.0.0.2:80 svc"} {
		value := strings.Fields(want)[1]
		code, stdout, errOut := fence(t, addr, "elect", "svc", "--value", value, "--owner", "host"+value[7:8],
			"--", "sh", "-c", `echo "$FENCE_TOKEN $FENCE_VALUE $FENCE_LOCK"`)
		if code != 0 || strings.TrimSpace(stdout) != want {
			t.Fatalf("elect %d: exit %d, stdout %q (want %q), stderr %s", i+1, code, stdout, want, errOut)
		}
		if !strings.Contains(errOut, `elected leader of "svc" with token`) {
			t.Fatalf("elect %d: stderr %q", i+1, errOut)
		}
		// The observer prints this leader before the next one campaigns
		// (a leader replaced before it is read may be skipped).
		lines := waitFor(t, out, i+1)
		wantJSON := `{"name":"svc","value":"` + value + `","token":` + want[:1] + `,"lease":` + want[:1] + `,"owner":"host` + value[7:8] + `"}`
		if lines[i] != wantJSON {
			t.Fatalf("observer line %d: %s, want %s", i+1, lines[i], wantJSON)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("observer exited %d after its interrupt", code)
	}
	code, _, errOut := fence(t, addr, "elect", "svc", "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Fatalf("elect with a failing command: exit %d (%s), want the command's 7", code, errOut)
	}
}

func TestElectRefusesBadUsage(t *testing.T) {
	addr := startServer(t)
	for _, args := range [][]string{
		{"elect", "svc"},
		{"elect", "svc", "--observe", "--", "true"},
		{"elect", "--", "true"},
		{"elect", "svc", "--ttl", "0s", "--", "true"},
		{"elect", "", "--", "true"},
		{"elect", "svc", "--ttl", "3s", "--grace", "5s", "--", "true"},
	} {
		if code, _, errOut := fence(t, addr, args...); code != ExitUsage || errOut == "" {
			t.Errorf("fence %q: exit %d (%s), want %d with a message", args, code, errOut, ExitUsage)
		}
	}
}

// TestElectRefusesMixedFlags: the flags of campaigning with --observe, or
// --json without it, were silently ignored (an observer started with
// --value "mine" campaigns for nothing and says nothing). They are usage
// errors, refused before any server is called (none listens here).
func TestElectRefusesMixedFlags(t *testing.T) {
	for _, args := range [][]string{
		{"elect", "svc", "--observe", "--value", "mine"},
		{"elect", "svc", "--observe", "--ttl", "5s"},
		{"elect", "svc", "--observe", "--owner", "me"},
		{"elect", "svc", "--observe", "--grace", "1s"},
		{"elect", "svc", "--observe", "--lock-delay", "1s"},
		{"elect", "svc", "--json", "--", "true"},
	} {
		if code, _, errOut := fence(t, "127.0.0.1:1", args...); code != ExitUsage || errOut == "" {
			t.Errorf("fence %q: exit %d (%s), want %d with a message", args, code, errOut, ExitUsage)
		}
	}
}

// TestElectObserveQuotesValues: fence elect --observe printed a leader's
// value raw, so a value with a newline (or a terminal escape) — anyone
// who may campaign chooses it — printed as two leaders, the second made
// up. Each leader is one line, its value quoted as fence watch quotes it.
func TestElectObserveQuotesValues(t *testing.T) {
	addr := startServer(t)
	out, stop := background(t, addr, "elect", "svc", "--observe")
	value := "10.0.0.1:80\nsvc: 10.6.6.6:80 leads (lease #9, mallory), token 99\x1b[2K"
	if code, _, errOut := fence(t, addr, "elect", "svc", "--value", value, "--owner", "host1", "--", "true"); code != 0 {
		t.Fatalf("elect: exit %d, %s", code, errOut)
	}
	waitFor(t, out, 1)
	if code := stop(); code != 0 {
		t.Fatalf("observer exited %d after its interrupt", code)
	}
	want := `svc: "10.0.0.1:80\nsvc: 10.6.6.6:80 leads (lease #9, mallory), token 99\x1b[2K" leads (lease #1, host1), token 1` + "\n"
	if got := out.String(); got != want {
		t.Fatalf("observer printed %q, want %q", got, want)
	}
}
