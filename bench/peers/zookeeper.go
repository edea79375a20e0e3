package peers

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencehq/fence/internal/bench"
)

// zkJar is Debian's ZooKeeper server jar; its manifest names the jars it
// needs, all in /usr/share/java.
const zkJar = "/usr/share/java/zookeeper.jar"

//go:embed zookeeper-install.sh
var zkInstallScript string

// InstallZooKeeper installs Debian's zookeeper package (and so a JRE) with
// zookeeper-install.sh unless its jar and java are there already; the
// script's output goes to w.
func InstallZooKeeper(w io.Writer) error {
	if _, err := os.Stat(zkJar); err == nil {
		if _, err := exec.LookPath("java"); err == nil {
			return nil
		}
	}
	// -c, not the script on standard input: apt-get or dpkg could read it.
	cmd := exec.Command("bash", "-c", zkInstallScript, "zookeeper-install.sh")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("install zookeeper (bench/peers/zookeeper-install.sh): %w", err)
	}
	return nil
}

// zkPorts are server id's (1-based) client, quorum and election ports:
// ten apart per server from base.
func zkPorts(base, id int) (client, quorum, election int) {
	p := base + 10*(id-1)
	return p, p + 1, p + 2
}

// zkConfig is server id's zoo.cfg in an ensemble of n on 127.0.0.1 whose
// data (snapshots) and transaction log are under dir/zk<id>. forceSync=yes
// (ZooKeeper's default, said explicitly) fsyncs the transaction log before
// a write is acknowledged; the timing is Debian's zoo.cfg (tickTime 2 s,
// initLimit 10, syncLimit 5). The admin server (port 8080) is off, any
// number of connections from one address is allowed (every client is on
// 127.0.0.1), and the four-letter words srvr and ruok answer.
func zkConfig(dir string, base, n, id int) string {
	client, _, _ := zkPorts(base, id)
	own := filepath.Join(dir, fmt.Sprintf("zk%d", id))
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=2000\ninitLimit=10\nsyncLimit=5\n")
	fmt.Fprintf(&b, "dataDir=%s\ndataLogDir=%s\n", filepath.Join(own, "data"), filepath.Join(own, "log"))
	fmt.Fprintf(&b, "clientPort=%d\nclientPortAddress=127.0.0.1\n", client)
	fmt.Fprintf(&b, "forceSync=yes\nmaxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n")
	for i := 1; i <= n; i++ {
		_, quorum, election := zkPorts(base, i)
		fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", i, quorum, election)
	}
	return b.String()
}

// zkCommand runs one server with config file cfg: Debian's jar, with
// -Xmx1000m (zkServer.sh's default heap) and its warnings on standard
// output through log4j 1.2 and Debian's /etc/zookeeper/conf/log4j.properties
// (both dependencies of the package), so the slow-fsync warnings of the
// transaction log are in the server's log.
func zkCommand(cfg string) []string {
	cp := strings.Join([]string{"/etc/zookeeper/conf", zkJar, "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"}, ":")
	return []string{"java", "-Xmx1000m", "-Dzookeeper.root.logger=WARN,CONSOLE", "-cp", cp,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg}
}

// zkMode is the role a server's answer to the four-letter word srvr
// names on its "Mode:" line (leader, follower, standalone), or "" when
// there is none (e.g. "This ZooKeeper instance is not currently serving
// requests" while it elects).
func zkMode(srvr string) string {
	for _, line := range strings.Split(srvr, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// ZooKeeper is a 3-server ZooKeeper ensemble (Debian's package, each
// server a QuorumPeerMain JVM of our own) on 127.0.0.1; locks are
// go-zookeeper's zk.Lock recipe.
type ZooKeeper struct {
	Servers []string // client addresses
	TTL     time.Duration
	procs   []*Proc
	held    zkHeld // sessions LeaseCreator opened
}

// StartZooKeeper installs ZooKeeper if needed, starts the ensemble with
// its files in dir and client ports from basePort, and waits until a
// leader is elected and a client can write.
func StartZooKeeper(dir string, basePort int, ttl time.Duration) (*ZooKeeper, error) {
	if err := InstallZooKeeper(os.Stderr); err != nil {
		return nil, err
	}
	const n = 3
	z := &ZooKeeper{TTL: ttl}
	for id := 1; id <= n; id++ {
		own := filepath.Join(dir, fmt.Sprintf("zk%d", id))
		cfg := filepath.Join(own, "zoo.cfg")
		err := errors.Join(os.MkdirAll(filepath.Join(own, "data"), 0o755), os.MkdirAll(filepath.Join(own, "log"), 0o755))
		if err == nil {
			err = errors.Join(os.WriteFile(cfg, []byte(zkConfig(dir, basePort, n, id)), 0o644),
				os.WriteFile(filepath.Join(own, "data", "myid"), []byte(fmt.Sprintln(id)), 0o644))
		}
		var p *Proc
		if err == nil {
			p, err = StartProc(fmt.Sprintf("zk%d", id), zkCommand(cfg), filepath.Join(dir, fmt.Sprintf("zk%d.log", id)))
		}
		if err != nil {
			z.Stop()
			return nil, err
		}
		z.procs = append(z.procs, p)
		client, _, _ := zkPorts(basePort, id)
		z.Servers = append(z.Servers, fmt.Sprintf("127.0.0.1:%d", client))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := z.ready(ctx); err != nil {
		z.Stop()
		return nil, fmt.Errorf("zookeeper ensemble not ready: %w (logs in %s)", err, dir)
	}
	if err := z.warm(ctx); err != nil {
		z.Stop()
		return nil, fmt.Errorf("zookeeper warm-up: %w (logs in %s)", err, dir)
	}
	return z, nil
}

// zkWarmUp is how long a started ensemble is loaded before it is measured.
const zkWarmUp = 3 * time.Second

// warm runs the mixed load (lock cycles and pings, 16 clients) for
// zkWarmUp, unmeasured: a JVM interprets the servers' code at first and
// compiles it as it runs, so a fresh ensemble's first seconds measure the
// JIT compiler, not ZooKeeper (fence and etcd are compiled ahead of time).
func (z *ZooKeeper) warm(ctx context.Context) error {
	_, err := bench.Run(ctx, bench.Config{Target: z, Workload: bench.Mixed, Clients: 16, Duration: zkWarmUp,
		MaxOps: 1 << 40, TTL: z.TTL, Window: 64})
	return err
}

// ready waits until every server serves and a client has created
// /peerbench (the parent of every lock).
func (z *ZooKeeper) ready(ctx context.Context) error {
	if err := WaitHealthy(ctx, z, 80*time.Second); err != nil {
		return err
	}
	conn, err := z.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Create("/peerbench", nil, 0, zk.WorldACL(zk.PermAll))
	if errors.Is(err, zk.ErrNodeExists) {
		err = nil
	}
	return err
}

// Stop closes the sessions LeaseCreator opened and ends the servers.
func (z *ZooKeeper) Stop() {
	z.held.close()
	for _, p := range z.procs {
		p.Stop()
	}
}

// Name returns "zookeeper".
func (z *ZooKeeper) Name() string { return "zookeeper" }

// Procs are the server processes.
func (z *ZooKeeper) Procs() []*Proc { return z.procs }

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// connect opens a session of z.TTL with every server listed (the client
// picks one at random and moves to another when it fails) and waits until
// the session is established.
func (z *ZooKeeper) connect(ctx context.Context) (*zk.Conn, error) {
	conn, events, err := zk.Connect(z.Servers, z.TTL, zk.WithLogger(zkQuiet{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, nil
			}
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("zookeeper session: %w", ctx.Err())
		}
	}
}

// Locker gives worker w its own connection and session. Locks are
// go-zookeeper's zk.Lock on zkLockPath(name): an ephemeral sequential
// node, held when it has the lowest sequence number, each waiter watching
// the node before its own.
func (z *ZooKeeper) Locker(ctx context.Context, _ int) (bench.Locker, error) {
	conn, err := z.connect(ctx)
	if err != nil {
		return nil, err
	}
	return &zkLocker{conn: conn}, nil
}

type zkLocker struct{ conn *zk.Conn }

// zkLockPath is the node whose children queue for the lock name: one
// level under /peerbench (the slashes of name become underscores), so
// the recipe's first cycle on a name creates one parent node, not one per
// level of the name (etcd's and fence's names need no node at all).
func zkLockPath(name string) string {
	return "/peerbench/" + strings.ReplaceAll(name, "/", "_")
}

// Lock runs zk.Lock, which takes no context: when ctx ends first, Lock
// returns ctx's error and the abandoned attempt, if it is granted later,
// is released at once.
func (l *zkLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	lk := zk.NewLock(l.conn, zkLockPath(name), zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- lk.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return func(context.Context) error { return lk.Unlock() }, nil
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = lk.Unlock()
			}
		}()
		return nil, ctx.Err()
	}
}

func (l *zkLocker) Close() error {
	l.conn.Close()
	return nil
}

// KillLeader SIGKILLs the server whose srvr answer says "Mode: leader".
func (z *ZooKeeper) KillLeader(ctx context.Context) (*Proc, error) {
	for i, mode := range z.modes(ctx) {
		if mode == "leader" {
			z.procs[i].Kill()
			return z.procs[i], nil
		}
	}
	return nil, errors.New("no zookeeper server reports itself as leader")
}

// Healthy reports whether every server serves as leader or follower, with
// exactly one leader.
func (z *ZooKeeper) Healthy(ctx context.Context) bool {
	leaders := 0
	for _, mode := range z.modes(ctx) {
		switch mode {
		case "leader":
			leaders++
		case "follower":
		default:
			return false
		}
	}
	return leaders == 1
}

// modes asks every server for srvr and returns each one's Mode ("" where
// it does not answer within a second).
func (z *ZooKeeper) modes(ctx context.Context) []string {
	modes := make([]string, len(z.Servers))
	for i, addr := range z.Servers {
		c, cancel := context.WithTimeout(ctx, time.Second)
		out, err := fourLetterWord(c, addr, "srvr")
		cancel()
		if err == nil {
			modes[i] = zkMode(out)
		}
	}
	return modes
}

// fourLetterWord sends one of ZooKeeper's four-letter words to addr and
// returns the answer (the server closes the connection after it).
func fourLetterWord(ctx context.Context, addr, word string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := io.WriteString(conn, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(conn))
	return string(b), err
}
