// Package cli holds the fence commands (cobra). cmd/fence only calls Execute,
// so every command can be tested with SetArgs and SetOut.
package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/buildinfo"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// Exit codes of fence: the one table (README.md, "Exit codes", documents it).
// fence run passes its command's own code through instead when the command
// finishes (128+N if a signal N ended it), so a command's code can collide.
const (
	ExitError       = 1   // something went wrong; the message says what
	ExitUsage       = 2   // bad flags or arguments, including a name or TTL the server refused
	ExitNotHeld     = 3   // unlock, release --force: nothing to release (already unlocked, expired, or not held)
	ExitUnavailable = 69  // no fence server could be reached at --server (sysexits' EX_UNAVAILABLE)
	ExitNotAcquired = 75  // the lock could not be acquired (held, and --wait ran out)
	ExitLeaseLost   = 76  // the lease was lost while the command ran; it was stopped
	ExitInterrupted = 130 // run, elect: interrupted while waiting for the lock or campaigning (128 + SIGINT, as a shell reports it)
)

// exitCode is the exit code of a command that failed with err.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, client.ErrInvalid):
		return ExitUsage
	case errors.Is(err, client.ErrUnreachable):
		return ExitUnavailable
	case errors.Is(err, client.ErrLocked):
		return ExitNotAcquired
	case errors.Is(err, client.ErrNotHeld):
		return ExitNotHeld
	case strings.HasPrefix(err.Error(), "unknown command"): // cobra has no typed error for it
		return ExitUsage
	}
	return ExitError
}

// message is err as fence prints it, after "fence: ". The client's errors
// each begin with "fence: ", so wrapping one in another repeats it; only the
// first is kept.
func message(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "fence: "), ": fence: ", ": ")
}

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// globals are the flags every client command shares.
type globals struct {
	servers        string
	connectTimeout time.Duration
	adminTokenFile string
	tokenFile      string    // --token-file ($FENCE_AUTH_TOKEN): this client's identity under a policy
	tls            pki.Files // --ca, --cert, --key ($FENCE_CA, $FENCE_CERT, $FENCE_KEY)
	insecure       bool      // --insecure: plaintext
}

// addrs are the --server addresses.
func (g *globals) addrs() []string {
	var addrs []string
	for _, a := range strings.Split(g.servers, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// devDataDir is the data dir of 'fence serve' with no flags; client commands
// look for its dev certificates there when given none.
const devDataDir = "fence-data"

// tlsConfig resolves how client commands connect: nil for plaintext
// (--insecure), else TLS with the files of --ca/--cert/--key, of
// $FENCE_CA/$FENCE_CERT/$FENCE_KEY, or of the dev server in ./fence-data/tls.
func (g *globals) tlsConfig() (*tls.Config, error) {
	if g.insecure {
		if g.tls.Set() {
			return nil, &exitError{ExitUsage, errors.New("--insecure connects in plaintext, but TLS files are given too " +
				"(--ca/--cert/--key, or $" + client.EnvCA + "/$" + client.EnvCert + "/$" + client.EnvKey + "): drop one or the other")}
		}
		return nil, nil
	}
	files := g.tls
	if !files.Set() {
		// The dev server's certificates are for this machine's server only:
		// a remote server is never trusted on a CA found in the directory.
		for _, a := range g.addrs() {
			if !pki.IsLoopback(a) {
				return nil, errors.New("no TLS certificates for " + a + ": give --ca, --cert and --key (or FENCE_CA, FENCE_CERT, FENCE_KEY); " +
					"--insecure talks plaintext to a server started with --insecure")
			}
		}
		files = pki.ClientFiles(server.DevTLSDir(devDataDir))
		if _, err := os.Stat(files.CA); err != nil {
			return nil, errors.New("no TLS certificates: give --ca, --cert and --key (or FENCE_CA, FENCE_CERT, FENCE_KEY); " +
				"a dev server ('fence serve') keeps them in " + server.DevTLSDir(devDataDir) + ", found when you run fence in the same directory; " +
				"--insecure talks plaintext to a server started with --insecure")
		}
	}
	cfg, err := pki.ClientTLS(files)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return cfg, nil
}

// adminToken reads --admin-token-file, or else $FENCE_ADMIN_TOKEN.
func (g *globals) adminToken() (string, error) {
	return readSecret("--admin-token-file", g.adminTokenFile, "FENCE_ADMIN_TOKEN")
}

// readSecret reads the file a flag names, or else the environment variable.
func readSecret(flag, path, env string) (string, error) {
	if path == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (g *globals) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, g.connectTimeout)
	defer cancel()
	token, err := g.adminToken()
	if err != nil {
		return nil, err
	}
	if token != "" {
		opts = append(opts, client.WithAdminToken(token))
	}
	ident, err := readSecret("--token-file", g.tokenFile, "FENCE_AUTH_TOKEN")
	if err != nil {
		return nil, err
	}
	if ident != "" {
		opts = append(opts, client.WithToken(ident))
	}
	tlsCfg, err := g.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		opts = append(opts, client.WithInsecure())
	} else {
		opts = append(opts, client.WithTLS(tlsCfg))
	}
	c, err := client.Dial(ctx, g.addrs(), append(opts, client.WithFailFast())...)
	if err != nil {
		return nil, fmt.Errorf("%w\n(--server or $FENCE_SERVER: the servers' --grpc-addr, comma-separated; 'fence serve' starts one)", err)
	}
	return c, nil
}

// withClient dials the server, runs fn, and closes the client.
func (g *globals) withClient(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error, opts ...client.Option) error {
	c, err := g.dial(cmd.Context(), opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(cmd.Context(), c)
}

// NewRoot returns the fence command tree.
func NewRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "fence",
		Short: "A lock service with leases and fencing tokens",
		Long: `fence hands out leases (locks with a time limit, renewed while the holder
works) and, with every grant, a fencing token that only grows, so storage can
refuse a holder whose lease already ran out.

Start a single node with 'fence serve' (data in ./fence-data). The other
commands talk to it at --server (default 127.0.0.1:7300, or $FENCE_SERVER).`,
		Example: `  fence serve
  fence run jobs/nightly --ttl 30s -- ./nightly.sh
  fence ls`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return checkFlags(cmd) },
	}
	defServer := os.Getenv("FENCE_SERVER")
	if defServer == "" {
		defServer = "127.0.0.1:7300"
	}
	root.PersistentFlags().StringVar(&g.servers, "server", defServer, "fence server address(es), comma-separated ($FENCE_SERVER)")
	root.PersistentFlags().DurationVar(&g.connectTimeout, "connect-timeout", 5*time.Second, "how long to wait for a server that does not answer (an unknown host, a refused connection or a port that is not fence's fails at once)")
	pf := root.PersistentFlags()
	pf.StringVar(&g.tls.CA, "ca", os.Getenv(client.EnvCA), "CA certificate the server's must chain to ($"+client.EnvCA+"; default: the dev server's in ./"+server.DevTLSDir(devDataDir)+")")
	pf.StringVar(&g.tls.Cert, "cert", os.Getenv(client.EnvCert), "client certificate ($"+client.EnvCert+")")
	pf.StringVar(&g.tls.Key, "key", os.Getenv(client.EnvKey), "client certificate's key ($"+client.EnvKey+")")
	pf.BoolVar(&g.insecure, "insecure", false, "talk plaintext (to a server started with --insecure; serve: serve plaintext)")
	pf.StringVar(&g.tokenFile, "token-file", "", "file holding this client's bearer token, its identity under the servers' policy when it has no certificate (default $FENCE_AUTH_TOKEN; not $FENCE_TOKEN, which is a fencing token)")
	root.PersistentFlags().StringVar(&g.adminTokenFile, "admin-token-file", "", "file holding the admin token (default $FENCE_ADMIN_TOKEN): serve requires it on admin calls, other commands send it")
	root.AddCommand(offline(newServe(g), "insecure", "admin-token-file"), newRun(g), newElect(g), newLock(g), newUnlock(g), newStatus(g), newLs(g), newTop(g), newHot(g), newDashboard(g), newWatch(g), newRelease(g),
		offline(newDemo()), newDemoWorker(), newMembers(g), newSnapshot(g), newBench(g), offline(newCerts()), offline(newPolicy()), offline(newAdvise(g), "ca", "cert", "key", "insecure"), offline(newVersion()))
	root.Version = buildinfo.Get().String()
	root.SetVersionTemplate("{{.Version}}\n")
	return root
}

// Execute runs the command line of this process and returns its exit code.
func Execute(ctx context.Context) int {
	return Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// Run runs fence with args and returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(usageError)
	if err := root.ExecuteContext(ctx); err != nil {
		root.PrintErrln("fence:", message(err))
		return exitCode(err)
	}
	return 0
}
