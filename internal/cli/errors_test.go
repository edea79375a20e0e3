package cli

import (
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// TestErrorTable pins the message and the exit code of each way a fence
// command fails, run in-process against real servers (and against ports
// that are not fence's). Every message has one "fence:" and no gRPC
// framing, and comes at once.
func TestErrorTable(t *testing.T) {
	srv := locktest.Start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" }) // plaintext
	addr := srv.GRPCAddr()
	certs := locktest.NewCerts(t)
	tlsSrv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	tlsFlags := []string{"--ca", certs.Client.CA, "--cert", certs.Client.Cert, "--key", certs.Client.Key}

	if code, _, errOut := fence(t, addr, "lock", "held", "--owner", "holder"); code != 0 {
		t.Fatalf("lock held: %d %s", code, errOut)
	}
	heldLease := env(mustLock(t, addr, "mine"))["FENCE_LEASE"]
	endedLease := env(mustLock(t, addr, "gone"))["FENCE_LEASE"]
	if code, _, errOut := fence(t, addr, "unlock", "--lease", endedLease); code != 0 {
		t.Fatalf("first unlock: %d %s", code, errOut)
	}

	refused := closedPort(t)
	silent := listen(t, func(c net.Conn) {}) // accepts, never answers
	grpcOnly := listen(t, nil)
	go grpc.NewServer().Serve(grpcOnly.lis) // a gRPC server without fence's service
	bad := "bad\x01name"

	for _, tt := range []struct {
		name string
		args []string // after --insecure --server addr, unless raw
		raw  bool     // args are the whole command line
		env  map[string]string
		code int
		msg  string
		not  string // must not appear either
	}{
		// usage
		{name: "unknown command", args: []string{"nosuch"}, code: ExitUsage, msg: `unknown command "nosuch" for "fence"`},
		{name: "unknown root flag", args: []string{"--bogus"}, code: ExitUsage, msg: "unknown flag: --bogus (see 'fence --help')"},
		{name: "unknown subcommand flag", args: []string{"members", "add", "--bogus"}, code: ExitUsage, msg: "unknown flag: --bogus (see 'fence members add --help')"},
		{name: "bad duration", args: []string{"lock", "x", "--ttl", "banana"}, code: ExitUsage, msg: `invalid argument "banana" for "--ttl" flag`},
		{name: "missing argument", args: []string{"status"}, code: ExitUsage, msg: "accepts 1 arg(s), received 0 (see 'fence status --help')"},
		{name: "run without --", args: []string{"run", "job", "sh"}, code: ExitUsage, msg: "put -- before the command"},
		{name: "run grace too long", args: []string{"run", "job", "--ttl", "3s", "--grace", "10s", "--", "true"}, code: ExitUsage,
			msg: "--grace 10s must be positive and shorter than the TTL minus its 10% safety margin (2.7s)"},
		{name: "run ttl 0", args: []string{"run", "job", "--ttl", "0", "--", "true"}, code: ExitUsage, msg: "--ttl 0s: must be positive (see 'fence run --help')", not: "--grace"},
		{name: "lock ttl 0", args: []string{"lock", "x", "--ttl", "0"}, code: ExitUsage, msg: "--ttl 0s: must be positive (see 'fence lock --help')"},
		{name: "lock negative wait", args: []string{"lock", "x", "--wait", "-1s"}, code: ExitUsage, msg: "--wait -1s: a duration cannot be negative", not: "DeadlineExceeded"},
		{name: "run negative wait", args: []string{"run", "x", "--wait", "-1s", "--", "true"}, code: ExitUsage, msg: "--wait -1s: a duration cannot be negative"},
		{name: "ttl out of the server's bounds", args: []string{"lock", "x", "--ttl", "2h"}, code: ExitUsage,
			msg: "create lease: invalid argument: ttl 2h0m0s is outside this server's bounds 1s…1h0m0s"},
		{name: "lock bad name", args: []string{"lock", bad}, code: ExitUsage, msg: `lock "bad\x01name": invalid argument: lock name has a control character (U+0001) at byte 3`},
		{name: "status bad name", args: []string{"status", bad}, code: ExitUsage, msg: "invalid argument: lock name has a control character"},
		{name: "unlock without lease", args: []string{"unlock"}, code: ExitUsage, msg: "no lease given"},
		{name: "unlock NAME without lease", args: []string{"unlock", "mine"}, code: ExitUsage, msg: "never by name alone"},
		{name: "unlock another NAME", args: []string{"unlock", "other"}, env: map[string]string{"FENCE_LEASE": heldLease, "FENCE_LOCK": "mine"}, code: ExitUsage,
			msg: `$FENCE_LEASE is the lease of "mine" ($FENCE_LOCK), not of "other"; nothing was released`},
		{name: "unlock bad secret", args: []string{"unlock", "--lease", "zz"}, code: ExitUsage, msg: `invalid argument: "zz" is not a lease secret`},
		{name: "release without --force", args: []string{"release", "held"}, code: ExitUsage, msg: "pass --force to confirm"},
		// (a bad --log-level and --ttl: should the check let them through, they fail at once rather than serve)
		{name: "serve with a client flag", args: []string{"serve", "--log-level", "bogus"}, code: ExitUsage, msg: "--server is for commands that call a server; 'fence serve' does not use it"},
		{name: "demo with a client flag", raw: true, args: []string{"--ca", "x", "demo", "--ttl", "-1s"}, code: ExitUsage, msg: "--ca is for commands that call a server; 'fence demo' does not use it"},

		// not acquired
		{name: "lock held", args: []string{"lock", "held", "--wait", "0"}, code: ExitNotAcquired, msg: `lock "held" is held by lease #1 (owner "holder") with token 1`},
		{name: "run held", args: []string{"run", "held", "--wait", "0", "--", "true"}, code: ExitNotAcquired, msg: `lock "held" is held by lease #1 (owner "holder")`},
		{name: "lock wait ran out", args: []string{"lock", "held", "--wait", "200ms"}, code: ExitNotAcquired, msg: `lock "held" is still held after waiting 200ms (--wait)`},
		{name: "run wait ran out", args: []string{"run", "held", "--wait", "200ms", "--", "true"}, code: ExitNotAcquired, msg: `lock "held" is still held after waiting 200ms (--wait)`},

		// nothing to release
		{name: "second unlock", args: []string{"unlock"}, env: map[string]string{"FENCE_LEASE": endedLease}, code: ExitNotHeld,
			msg: "lock not held: the lease had already ended (unlocked before, or its TTL ran out), or its lock was force-released"},
		{name: "release a free lock", args: []string{"release", "--force", "free"}, code: ExitNotHeld, msg: `lock not held: lock "free" is not held; nothing to release`},

		// no server there
		{name: "DNS failure", args: []string{"--server", "nosuch.invalid:7300", "ls"}, code: ExitUnavailable, msg: `cannot reach a fence server: nosuch.invalid:7300: no such host "nosuch.invalid"`},
		{name: "connection refused", args: []string{"--server", refused, "ls"}, code: ExitUnavailable, msg: refused + ": connection refused"},
		{name: "no answer", args: []string{"--server", silent.addr, "--connect-timeout", "300ms", "ls"}, code: ExitUnavailable, msg: silent.addr + ": no answer within 300ms"},
		{name: "metrics port, plaintext", args: []string{"--server", srv.MetricsAddr(), "ls"}, code: ExitUnavailable, msg: "answers HTTP/1, not gRPC: is it fence's metrics port?"},
		{name: "metrics port, TLS", raw: true, args: append(tlsFlags, "--server", tlsSrv.MetricsAddr(), "ls"), code: ExitUnavailable,
			msg: "list locks: " + tlsSrv.MetricsAddr() + " does not serve this call: is it fence's gRPC port"},
		{name: "gRPC but not fence", args: []string{"--server", grpcOnly.addr, "ls"}, code: ExitUnavailable, msg: "does not serve this call"},
		{name: "TLS to a plaintext server", raw: true, args: append(tlsFlags, "--server", addr, "ls"), code: ExitUnavailable,
			msg: addr + " does not answer in TLS: a server started with --insecure needs --insecure here too"},
		{name: "plaintext to a TLS server", args: []string{"--server", tlsSrv.GRPCAddr(), "ls"}, code: ExitUnavailable, msg: "closed the connection at once: it probably serves TLS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"FENCE_LEASE", "FENCE_LOCK"} {
				t.Setenv(k, tt.env[k])
			}
			var code int
			var errOut string
			// At once, not after --connect-timeout: the messages pinned
			// name the cause (a wait that ran out says "no answer within"),
			// so no clock is needed to tell.
			if tt.raw {
				code, _, errOut = fenceArgs(t, tt.args...)
			} else {
				code, _, errOut = fence(t, addr, tt.args...)
			}
			if code != tt.code || !strings.Contains(errOut, tt.msg) {
				t.Errorf("fence %q: exit %d, stderr %q; want %d and %q", tt.args, code, errOut, tt.code, tt.msg)
			}
			for _, never := range []string{"rpc error", "desc =", "context deadline exceeded", tt.not} {
				if never != "" && strings.Contains(errOut, never) {
					t.Errorf("fence %q: stderr %q has %q", tt.args, errOut, never)
				}
			}
			// A wait that ran out may first have said it waits (waiting.go):
			// that line is no error message.
			if i := strings.Index(errOut, "\n"); strings.HasPrefix(errOut, `fence: waiting for "`) && strings.Contains(tt.msg, "after waiting") {
				errOut = errOut[i+1:]
			}
			if n := strings.Count(errOut, "fence:"); n != 1 || !strings.HasPrefix(errOut, "fence: ") {
				t.Errorf("fence %q: stderr %q should start with the only \"fence: \"", tt.args, errOut)
			}
		})
	}
}

// TestOfflineHelp: commands that call no server leave the client flags out
// of their help.
func TestOfflineHelp(t *testing.T) {
	for _, tt := range []struct {
		cmd        string
		has, hasNo []string
	}{
		// flag lines of the help, not the examples
		{"serve", []string{"--audit-file string", "--insecure ", "--admin-token-file string"},
			[]string{"--server string", "--connect-timeout duration", "--ca string", "--cert string", "--key string", "--token-file string"}},
		{"demo", []string{"--dsn string"}, []string{"--server string", "--insecure ", "--ca string", "--admin-token-file string"}},
		{"lock", []string{"--server string", "--connect-timeout duration", "--ca string", "--insecure "}, nil},
	} {
		code, out, _ := fenceArgs(t, tt.cmd, "--help")
		for _, s := range tt.has {
			if code != 0 || !strings.Contains(out, s) {
				t.Errorf("fence %s --help: exit %d, no %q in\n%s", tt.cmd, code, s, out)
			}
		}
		for _, s := range tt.hasNo {
			if strings.Contains(out, s) {
				t.Errorf("fence %s --help lists %q", tt.cmd, s)
			}
		}
	}
}

func mustLock(t *testing.T, addr, name string) string {
	t.Helper()
	code, out, errOut := fence(t, addr, "lock", name, "--ttl", "1m")
	if code != 0 {
		t.Fatalf("lock %s: %d %s", name, code, errOut)
	}
	return out
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

type listener struct {
	lis  net.Listener
	addr string
}

// listen listens on loopback until the test ends; with serve, it hands each
// connection to it, and closes them all when the test ends.
func listen(t *testing.T, serve func(net.Conn)) listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	if serve != nil {
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				serve(c)
			}
		}()
	}
	return listener{lis, lis.Addr().String()}
}
