package peers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencehq/fence/internal/bench"
)

// EtcdMember runs one embedded etcd member in this process until ctx ends:
// the body of the `etcd-member` subcommand. fsync stays on (etcd's default).
func EtcdMember(ctx context.Context, name, dir string, peerPort, clientPort int, cluster string) error {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, dir
	cfg.LogLevel = "error"
	peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", peerPort))
	client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", clientPort))
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = cluster
	cfg.InitialClusterToken = "fence-peerbench"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return errors.New("etcd member not ready after 60s")
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return err
	}
}

// Etcd is a 3-member etcd cluster run as separate processes of self (the
// peerbench binary), each a member started by EtcdMember.
type Etcd struct {
	Endpoints []string
	TTL       time.Duration
	procs     []*Proc
}

// StartEtcd starts the members and waits until the cluster answers.
func StartEtcd(self, dir string, basePort int, ttl time.Duration) (*Etcd, error) {
	var cluster []string
	for i := range 3 {
		cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i+1, basePort+2*i))
	}
	e := &Etcd{TTL: ttl}
	for i := range 3 {
		name := fmt.Sprintf("m%d", i+1)
		client := basePort + 2*i + 1
		p, err := StartProc(name, []string{self, "etcd-member", "--name", name, "--dir", filepath.Join(dir, name),
			"--peer-port", fmt.Sprint(basePort + 2*i), "--client-port", fmt.Sprint(client), "--cluster", strings.Join(cluster, ",")},
			filepath.Join(dir, name+".log"))
		if err != nil {
			e.Stop()
			return nil, err
		}
		e.procs = append(e.procs, p)
		e.Endpoints = append(e.Endpoints, fmt.Sprintf("127.0.0.1:%d", client))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		cli, err := e.client(ctx)
		if err == nil {
			_, err = cli.Put(ctx, "/peerbench/ready", "1")
			cli.Close()
		}
		if err == nil {
			return e, nil
		}
		select {
		case <-ctx.Done():
			e.Stop()
			return nil, fmt.Errorf("etcd cluster not ready: %w (logs in %s)", err, dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop ends the members.
func (e *Etcd) Stop() {
	for _, p := range e.procs {
		p.Stop()
	}
}

func (e *Etcd) client(ctx context.Context) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second, Context: ctx, Logger: zap.NewNop()})
}

// Name returns "etcd".
func (e *Etcd) Name() string { return "etcd" }

// Locker gives worker w its own client and session; locks are
// concurrency.Mutex, as etcd users take them.
func (e *Etcd) Locker(ctx context.Context, _ int) (bench.Locker, error) {
	cli, err := e.client(context.Background())
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(e.TTL/time.Second)), concurrency.WithContext(context.Background()))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdLocker{cli: cli, s: s}, nil
}

type etcdLocker struct {
	cli *clientv3.Client
	s   *concurrency.Session
}

func (l *etcdLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(l.s, "/peerbench/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (l *etcdLocker) Close() error {
	return errors.Join(l.s.Close(), l.cli.Close())
}

// Renewer grants a lease and keeps it alive on a raw LeaseKeepAlive stream
// (the stream clientv3's KeepAlive uses, without its TTL/3 pacing).
func (e *Etcd) Renewer(ctx context.Context, _ int) (bench.Renewer, error) {
	cli, err := e.client(context.Background())
	if err != nil {
		return nil, err
	}
	g, err := cli.Grant(ctx, int64(e.TTL/time.Second))
	if err != nil {
		cli.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(sctx)
	if err != nil {
		cancel()
		cli.Close()
		return nil, err
	}
	return &etcdRenewer{cli: cli, cancel: cancel, stream: stream, id: int64(g.ID)}, nil
}

// etcdRenewer matches answers to renewals in order: etcd answers a stream's
// keepalives in the order it got them and carries no sequence number.
type etcdRenewer struct {
	cli    *clientv3.Client
	cancel context.CancelFunc
	stream pb.Lease_LeaseKeepAliveClient
	id     int64

	mu   sync.Mutex
	seqs []uint64
}

func (r *etcdRenewer) Send(seq uint64) error {
	r.mu.Lock()
	r.seqs = append(r.seqs, seq)
	r.mu.Unlock()
	return r.stream.Send(&pb.LeaseKeepAliveRequest{ID: r.id})
}

func (r *etcdRenewer) Recv() (uint64, bool, error) {
	resp, err := r.stream.Recv()
	if err != nil {
		return 0, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seqs) == 0 {
		return 0, false, errors.New("etcd answered a keepalive it was not sent")
	}
	seq := r.seqs[0]
	r.seqs = r.seqs[1:]
	return seq, resp.TTL > 0, nil
}

func (r *etcdRenewer) Close() error {
	_ = r.stream.CloseSend()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := r.cli.Revoke(ctx, clientv3.LeaseID(r.id))
	r.cancel()
	return errors.Join(err, r.cli.Close())
}

// LeaseCreator gives worker w its own client; each call grants one lease.
func (e *Etcd) LeaseCreator(ctx context.Context, _ int, ttl time.Duration) (func(context.Context) error, func(), error) {
	cli, err := e.client(context.Background())
	if err != nil {
		return nil, nil, err
	}
	create := func(ctx context.Context) error {
		_, err := cli.Grant(ctx, int64(ttl/time.Second))
		return err
	}
	return create, func() { cli.Close() }, nil
}

// Procs are the member processes.
func (e *Etcd) Procs() []*Proc { return e.procs }
