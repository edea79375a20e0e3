package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// TestDiskFullEndsServe: a node whose raft log cannot be written (its disk
// is full) stops, and `fence serve` exits 1 saying why, so that its
// supervisor restarts it. Before, the process lived on with a stopped raft
// loop: a member that neither led nor followed, and looked alive.
func TestDiskFullEndsServe(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	// The WAL preallocates a 64 MiB segment; the snapshots need room of
	// their own, which the filler below takes.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=100m", "tmpfs", disk).CombinedOutput(); err != nil {
		requireOrSkip(t, "cannot mount a small tmpfs for a full disk (needs root): "+strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", disk).Run() })
	n := newNode(t, "--data-dir", filepath.Join(disk, "data"), "--snapshot-threshold", "20", "--trailing-logs", "5")
	n.start()
	exited := make(chan error, 1)
	cmd := n.cmd
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { // before newNode's: the process is reaped here
		if n.cmd != nil {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			n.cmd = nil
			n.log.Close()
		}
	})

	fillDisk(t, filepath.Join(disk, "filler"))
	var err error
	for i := 0; i < 200; i++ { // each call is an entry; every 20th entry a snapshot is due
		select {
		case err = <-exited:
			n.cmd = nil
			n.log.Close()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("fence serve ended with %v after its disk filled, want exit status 1; log:\n%s", err, n.logTail())
			}
			if log := n.logTail(); !strings.Contains(log, "the raft node stopped") {
				t.Fatalf("fence serve exited without saying its raft node stopped; log:\n%s", log)
			}
			return
		default:
		}
		_, _ = n.cli.CreateLease(timeout(t, time.Second), &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(time.Minute)})
	}
	select {
	case err = <-exited:
		n.cmd = nil
		n.log.Close()
		t.Fatalf("fence serve ended only after 200 calls (%v); log:\n%s", err, n.logTail())
	case <-time.After(10 * time.Second):
		t.Fatalf("fence serve still runs on a full disk after 200 calls; log:\n%s", n.logTail())
	}
}

// fillDisk writes zeros to path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	for {
		if _, err := f.Write(block); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}
