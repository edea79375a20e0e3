package cli

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/backup"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/locktest"
)

// redSave takes n grants on a fresh server, saves a backup and returns
// the file and the last token the server handed out.
func redSave(t *testing.T, grants int) (file string, last uint64) {
	t.Helper()
	addr := startServer(t)
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{addr}, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range grants {
		l, err := c.Lock(ctx, fmt.Sprintf("load/%d", i), client.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	file = filepath.Join(t.TempDir(), "fence.backup")
	if code, _, errOut := fence(t, addr, "snapshot", "save", file); code != 0 {
		t.Fatalf("save: %d %s", code, errOut)
	}
	return file, last
}

// redFirstToken restores file with the given floor flags, serves it and
// returns the first grant's token.
func redFirstToken(t *testing.T, file string, floor ...string) uint64 {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored")
	args := append([]string{"snapshot", "restore", file, "--data-dir", dir, "--node-id", "r1"}, floor...)
	if code, out, errOut := fenceArgs(t, args...); code != 0 {
		t.Fatalf("restore %v: %d %s%s", floor, code, out, errOut)
	}
	cfg := locktest.Config(dir)
	cfg.NodeID = "r1"
	srv, err := locktest.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	rc, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	l, err := rc.Lock(ctx, "after-restore", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return l.Token()
}

// FINDING (medium): restore computes the floor from the header's token
// (backup.Floor(h, …): the --token-floor check and h.Token+gap), never
// from the token of the state it actually seeds. The header is plain JSON
// covered only by an unkeyed SHA-256, so an edited or hand-made file (or
// any tool built on client.Backup + backup.Write with a wrong Token) whose
// header says a lower token than its state passes `status` ("checksum ok",
// showing the header's token) and `restore --token-gap N` then uses
// header+N: here the state's last token is 30, the header says 0, and with
// --token-gap 20 the old cluster may have handed out up to 50, yet the
// restored cluster's first token is 31 — a repeat of a token the old
// cluster may have granted. Fix: restore (and status) take the token, and
// leases/locks, from the decoded state (st.Token()), and refuse a file
// whose header disagrees with its state.
//
//	go test -count=1 -run TestRedteamRestoreGapTrustsTheHeaderToken ./internal/cli/
func TestRedteamRestoreGapTrustsTheHeaderToken(t *testing.T) {
	file, last := redSave(t, 30)
	h, state, err := backup.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	st, err := fsm.Unmarshal(state)
	if err != nil || st.Token() != last || h.Token != last {
		t.Fatalf("the honest backup: header token %d, state token %v (%v), last grant %d", h.Token, st, err, last)
	}
	h.Token = 0 // the header lies low; the state is untouched
	edited := filepath.Join(t.TempDir(), "edited.backup")
	f, err := os.OpenFile(edited, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.Write(f, h, state); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if code, out, errOut := fenceArgs(t, "snapshot", "status", edited); code != 0 || !strings.Contains(out, "last token  0") {
		t.Logf("status of the edited file: %d %s%s", code, out, errOut)
	} else {
		t.Logf("status accepts the edited file and shows its header's token 0 (the state's is %d):\n%s", last, out)
	}
	const gap = 20
	if first := redFirstToken(t, edited, "--token-gap", strconv.Itoa(gap)); first <= last+gap {
		t.Errorf("state's last token %d, --token-gap %d: the old cluster may have handed out up to %d, but the restored cluster's first token is %d",
			last, gap, last+gap, first)
	}
}

// FINDING (low): backup.Floor accepts a floor of exactly math.MaxInt64
// (--token-floor 9223372036854775807, or a --token-gap that reaches it),
// but the floor is the last token handed out, so the restored cluster's
// very first grant is 1<<63: a token that does not fit the signed 64-bit
// fence column the error messages (and fencing.Table's Limit, < 1<<63)
// promise, so every fenced write of the restored cluster is refused (or
// wraps negative in storage that casts it). Nothing in the fsm refuses to
// grant past MaxInt64 either. Fix: Floor must refuse floor ≥ MaxInt64 (and
// h.Token+gap ≥ MaxInt64; better, leave headroom), and the fsm should
// refuse a grant whose token would exceed MaxInt64.
//
//	go test -count=1 -run TestRedteamFloorAtMaxInt64GrantsAnUnfittingToken ./internal/cli/
func TestRedteamFloorAtMaxInt64GrantsAnUnfittingToken(t *testing.T) {
	file, _ := redSave(t, 1)
	if first := redFirstToken(t, file, "--token-floor", strconv.FormatUint(math.MaxInt64, 10)); first > math.MaxInt64 {
		t.Errorf("--token-floor %d was accepted, and the restored cluster's first token is %d: above every signed 64-bit column",
			uint64(math.MaxInt64), first)
	}
}
