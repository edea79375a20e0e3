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

// Red team (fixed): restore computed the floor from the header's token,
// never from the token of the state it seeds. The header is plain JSON
// covered only by an unkeyed SHA-256, so an edited or hand-made file whose
// header said a lower token than its state passed `status` and `restore
// --token-gap N` then used header+N: with the state's last token 30, a
// header of 0 and --token-gap 20 (the old cluster may have handed out up
// to 50), the restored cluster's first token was 31. Now both commands
// refuse a file whose header does not describe its state (backup.Open),
// and the floor is taken from the state's own token.
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
	const refusal = "does not describe its state"
	if code, out, errOut := fenceArgs(t, "snapshot", "status", edited); code != 1 || !strings.Contains(errOut, refusal) {
		t.Errorf("status of a file whose header lies about its state: %d %s%s", code, out, errOut)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if code, _, errOut := fenceArgs(t, "snapshot", "restore", edited, "--data-dir", dir, "--token-gap", "20"); code != 1 || !strings.Contains(errOut, refusal) {
		t.Errorf("restore of a file whose header lies about its state: %d %s", code, errOut)
	}
	const gap = 20
	if first := redFirstToken(t, file, "--token-gap", strconv.Itoa(gap)); first <= last+gap {
		t.Errorf("state's last token %d, --token-gap %d: the old cluster may have handed out up to %d, but the restored cluster's first token is %d",
			last, gap, last+gap, first)
	}
}

// Red team (fixed): backup.Floor accepted a floor of exactly MaxInt64, but
// the floor is the last token handed out, so the restored cluster's first
// grant was 1<<63, a token no signed 64-bit fence column holds. Now a floor
// must leave 2^30 tokens below 2^63; the largest one accepted gives a first
// token that fits.
//
//	go test -count=1 -run TestRedteamFloorAtMaxInt64GrantsAnUnfittingToken ./internal/cli/
func TestRedteamFloorAtMaxInt64GrantsAnUnfittingToken(t *testing.T) {
	file, _ := redSave(t, 1)
	dir := filepath.Join(t.TempDir(), "restored")
	if code, _, errOut := fenceArgs(t, "snapshot", "restore", file, "--data-dir", dir, "--token-floor", strconv.FormatUint(math.MaxInt64, 10)); code != ExitUsage || !strings.Contains(errOut, "fewer than") {
		t.Errorf("--token-floor MaxInt64: %d %s, want a usage error", code, errOut)
	}
	top := uint64(math.MaxInt64 - 1<<30)
	if first := redFirstToken(t, file, "--token-floor", strconv.FormatUint(top, 10)); first != top+1 || first > math.MaxInt64 {
		t.Errorf("--token-floor %d: the first token is %d", top, first)
	}
}
