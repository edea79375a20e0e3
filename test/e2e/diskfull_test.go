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
	// Room for the node to start: the WAL preallocates 64 MiB segments (two
	// at times: a new one is cut as the first snapshot is saved); the filler
	// takes the rest once the node leads, and again before every call.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", disk).CombinedOutput(); err != nil {
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

	filler, err := os.Create(filepath.Join(disk, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	var lastErr error
	failed := 0
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
		fillDisk(t, filler) // again at every call: the WAL may give back space (a segment dropped after a snapshot)
		if _, err := n.cli.CreateLease(timeout(t, time.Second), &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(time.Minute)}); err != nil {
			failed++
			lastErr = err
		}
	}
	t.Logf("%d of 200 calls failed, the last with %v", failed, lastErr)
	select {
	case err = <-exited:
		n.cmd = nil
		n.log.Close()
		t.Fatalf("fence serve ended only after 200 calls (%v); log:\n%s", err, n.logTail())
	case <-time.After(10 * time.Second):
		t.Fatalf("fence serve still runs on a full disk after 200 calls; log:\n%s", n.logTail())
	}
}

// fillDisk appends zeros to f until the file system has no byte left: in
// blocks of 1 MiB, then 4 KiB, then single bytes (the last page), so that
// even a small snapshot file finds no room.
func fillDisk(t *testing.T, f *os.File) {
	t.Helper()
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		block := make([]byte, size)
		for {
			_, err := f.Write(block)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
