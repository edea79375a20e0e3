package server_test

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/transport/transportpb"
)

// The raft port talks with members only: a node certificate of the CA for
// a name outside the membership gets no stream from a node that follows a
// leader, and a member's open stream is cut off at its first batch after
// its removal, its new streams refused. (A node without a leader hears from
// names it does not know, as a joiner must: TestJoinOverTLS.)
func TestRaftPortOnlyForMembers(t *testing.T) {
	certs := locktest.NewCerts(t)
	c := locktest.NewCluster(t, 3, certs.Serve)
	cluster := c.ClusterID()
	leader := c.Leader()
	var target, removed *locktest.Node // a member that stays, and one to remove
	for _, nd := range c.Nodes {
		switch {
		case nd == leader:
		case target == nil:
			target = nd
		default:
			removed = nd
		}
	}
	as := func(f pki.Files) func() (*raftStream, error) {
		cfg, err := pki.ClientTLS(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ServerName = "127.0.0.1"
		return func() (*raftStream, error) { return dialRaftStream(target.Server.RaftAddr(), cfg) }
	}
	hello := func(name string) *transportpb.Batch {
		return &transportpb.Batch{ClusterId: cluster, From: node.RaftID(name), To: node.RaftID(target.ID)}
	}

	// A stranger with a node certificate of the CA. (Until the target has
	// heard from the leader it has none, and hears from anyone: retry.)
	stranger := mustTLS(t, certs.Issue(pki.Node, "n9", time.Hour))
	ans, err := rtRaftHello(t, target.Server.RaftAddr(), stranger, hello("n9"))
	for end := time.Now().Add(5 * time.Second); ans == nil && err == nil && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		ans, err = rtRaftHello(t, target.Server.RaftAddr(), stranger, hello("n9"))
	}
	if err != nil || status.Code(ans) != codes.PermissionDenied || !strings.Contains(status.Convert(ans).Message(), "not a member") {
		t.Fatalf("a non-member's node certificate on the raft port: answer %v, transport %v", ans, err)
	}

	// A member opens a stream, then is removed.
	st, err := as(certs.NodeFiles(removed.ID))()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.send(hello(removed.ID)); err != nil {
		t.Fatal(err)
	}
	if ans, err := st.answer(); ans != nil || err != nil {
		t.Fatalf("a member's stream: answer %v, transport %v", ans, err)
	}
	cl, err := client.Dial(ctxT(t, 5*time.Second), c.Addrs(), client.WithTLSFiles(certs.Client.CA, certs.Client.Cert, certs.Client.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.RemoveMember(ctxT(t, 10*time.Second), removed.ID); err != nil {
		t.Fatal(err)
	}
	// The target applies the removal soon after the leader commits it; an
	// accepted batch gets no answer, a refused one the refusal.
	st.SetDeadline(time.Now().Add(15 * time.Second))
	answered := make(chan error, 1)
	go func() {
		ans, err := st.answer()
		if err != nil {
			ans = err
		}
		answered <- ans
	}()
	deadline := time.After(10 * time.Second)
	for {
		if err := st.send(hello(removed.ID)); err != nil {
			t.Fatalf("a removed member's open stream: %v", err)
		}
		select {
		case ans := <-answered:
			if status.Code(ans) != codes.PermissionDenied || !strings.Contains(status.Convert(ans).Message(), "was removed") {
				t.Fatalf("a removed member's open stream: answer %v", ans)
			}
			// cut off; and a new stream is refused at once
			ans, err := rtRaftHello(t, target.Server.RaftAddr(), mustTLS(t, certs.NodeFiles(removed.ID)), hello(removed.ID))
			if err != nil || status.Code(ans) != codes.PermissionDenied || !strings.Contains(status.Convert(ans).Message(), "was removed") {
				t.Fatalf("a removed member's new stream: answer %v, transport %v", ans, err)
			}
			// Nor does the name come back: a node that applied the removal
			// but not a re-add would refuse it for good if it led.
			err = cl.AddMember(ctxT(t, 10*time.Second), removed.ID, removed.Server.RaftAddr())
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "another --node-id") {
				t.Fatalf("adding the removed name again: %v, want FailedPrecondition saying to use another --node-id", err)
			}
			return
		case <-deadline:
			t.Fatal("a removed member's open stream still delivers 10 s after its removal")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func mustTLS(t *testing.T, f pki.Files) *tls.Config {
	t.Helper()
	cfg, err := pki.ClientTLS(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	return cfg
}
