package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Machine is what bounds every system here, measured in the same run: the
// cores, a loopback TCP round trip to another process (back to back, and
// after an idle gap, when the threads on both ends have gone to sleep and
// must be woken: what each message of a call that waits on another process
// pays), and one 4 KiB write + fdatasync on the disk that holds the data
// dirs.
type Machine struct {
	Host              string  `json:"host"`
	Cores             int     `json:"cores"`
	LoopbackRTTus     float64 `json:"loopback_rtt_p50_us"`
	IdleLoopbackRTTus float64 `json:"idle_loopback_rtt_p50_us"`
	FdatasyncUs       float64 `json:"fdatasync_p50_us"`
}

// idleGap is the pause before each idle round trip.
const idleGap = 500 * time.Microsecond

func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores; loopback TCP round trip p50 %.0f µs (%.0f µs after %v idle); 4 KiB write+fdatasync p50 %.0f µs",
		m.Host, m.Cores, m.LoopbackRTTus, m.IdleLoopbackRTTus, idleGap, m.FdatasyncUs)
}

// measureMachine measures the machine; self is this program, run as the
// echo process of the round trips.
func measureMachine(dir, self string) (Machine, error) {
	host, _ := os.Hostname()
	b, _ := os.ReadFile("/proc/cpuinfo")
	m := Machine{Host: host, Cores: strings.Count(string(b), "processor\t:")}
	echo := exec.Command(self, "loopback-echo")
	out, err := echo.StdoutPipe()
	if err != nil {
		return m, err
	}
	if err := echo.Start(); err != nil {
		return m, err
	}
	defer func() { _ = echo.Process.Kill(); _ = echo.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return m, fmt.Errorf("the echo process: %w", err)
	}
	addr = strings.TrimSpace(addr)
	if m.LoopbackRTTus, err = loopbackRTT(addr, 2000, 0); err != nil {
		return m, err
	}
	if m.IdleLoopbackRTTus, err = loopbackRTT(addr, 1000, idleGap); err != nil {
		return m, err
	}
	m.FdatasyncUs, err = fdatasync(filepath.Join(dir, "fdatasync-probe"), 1000)
	return m, err
}

// p50us times op n times, each after a pause of gap (not timed), and
// returns the median in microseconds.
func p50us(n int, gap time.Duration, op func() error) (float64, error) {
	d := make([]time.Duration, n)
	for i := range d {
		if gap > 0 {
			time.Sleep(gap)
		}
		start := time.Now()
		if err := op(); err != nil {
			return 0, err
		}
		d[i] = time.Since(start)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[n/2]) / float64(time.Microsecond), nil
}

// loopbackEcho is the echo process: it prints its address, then echoes
// every connection until it is killed (measureMachine kills it).
func loopbackEcho() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "loopback-echo:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// loopbackRTT pings a one-byte echo at addr n times, gap apart.
func loopbackRTT(addr string, n int, gap time.Duration) (float64, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 1)
	return p50us(n, gap, func() error {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	})
}

// fdatasync appends 4 KiB and syncs it n times.
func fdatasync(path string, n int) (float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	block := make([]byte, 4096)
	return p50us(n, 0, func() error {
		if _, err := f.Write(block); err != nil {
			return err
		}
		return syscall.Fdatasync(int(f.Fd()))
	})
}
