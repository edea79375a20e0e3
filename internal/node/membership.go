package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Membership errors.
var (
	// ErrUnknownMember: no member has that name.
	ErrUnknownMember = errors.New("no such member")
	// ErrMemberExists: a member already has that name or raft id.
	ErrMemberExists = errors.New("member exists")
	// ErrMemberRemoved: the name (or its raft id) was removed; it does not
	// come back (its certificate stays refused on the raft port).
	ErrMemberRemoved = errors.New("member was removed")
)

// MemberStatus is a member as Members reports it.
type MemberStatus struct {
	Member
	// Leader marks the member this node believes leads.
	Leader bool
	// Learner: the member copies the log without a vote, while it catches
	// up (else it is a voter).
	Learner bool
	// What the leader knows of the member's log (zero when this node does
	// not lead, and for the leader itself): Match is the highest index
	// known to be in it, Lag the entries it is behind the leader's commit.
	Match, Lag uint64
	// Active: the leader heard from it within an election timeout (raft's
	// RecentActive; the leader itself always).
	Active bool
	// LastContact is how long ago this node last heard from the member
	// (0 for itself; -1 if never since this node started).
	LastContact time.Duration
}

// Members returns the group's members as this node knows them.
func (n *Node) Members(ctx context.Context) ([]MemberStatus, error) {
	var out []MemberStatus
	err := n.group.control(ctx, func(c *core) {
		st := c.rn.Status()
		for _, m := range c.members.sorted() {
			s := MemberStatus{Member: m, Leader: m.ID == st.Lead, LastContact: -1}
			if hasID(st.Config.Learners, m.ID) {
				s.Learner = true
			}
			if pr, ok := st.Progress[m.ID]; ok && m.ID != c.cfg.id {
				s.Match, s.Active = pr.Match, pr.RecentActive
				if commit := st.GetCommit(); commit > pr.Match {
					s.Lag = commit - pr.Match
				}
			}
			switch d, ok := n.group.sinceHeard(m.ID); {
			case m.ID == c.cfg.id:
				s.LastContact, s.Active = 0, true
			case ok:
				s.LastContact = d
			}
			out = append(out, s)
		}
	})
	return out, err
}

// AddMember adds a node to the group as a learner, which gets the log
// without a vote, and returns what the new node needs to start (JoinInfo).
// The leader makes it a voter once it has caught up (promoteLearners), so a
// new member never holds back the quorum while it copies the log. Adding a
// member again with the same address is a no-op. A removed name is never
// added again (as etcd never reuses a removed member's id): a node that
// applied the removal but not yet a re-add would refuse the name for good
// if it led. Leader only.
func (n *Node) AddMember(ctx context.Context, name, raftAddr string) (JoinInfo, error) {
	m := Member{Name: name, RaftAddr: raftAddr, ID: RaftID(name)}
	var conflict, known, removed bool
	if err := n.group.control(ctx, func(c *core) {
		for _, o := range c.members {
			if o.Name == name || o.ID == m.ID {
				conflict, known = o != m, true
			}
		}
		_, removed = c.removed[m.ID]
	}); err != nil {
		return JoinInfo{}, err
	}
	if removed {
		return JoinInfo{}, fmt.Errorf("%w: %q was removed from this cluster, and a removed name never comes back: start the new node with another --node-id (and a node certificate for that name)", ErrMemberRemoved, name)
	}
	if conflict {
		return JoinInfo{}, fmt.Errorf("%w: %q (or a name with the same raft id) is a member with another address; remove it first", ErrMemberExists, name)
	}
	if !known {
		if err := n.changeMember(ctx, raftpb.ConfChangeAddLearnerNode, m); err != nil {
			return JoinInfo{}, err
		}
	}
	return JoinInfo{ClusterID: n.clusterID, Members: n.group.memberList()}, nil
}

// promoteLearners makes every learner that has caught up with the leader's
// commit index a voter, while this node leads, until ctx ends.
func (n *Node) promoteLearners(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !n.Ready() {
			continue
		}
		var ready []Member
		_ = n.group.control(ctx, func(c *core) {
			st := c.rn.Status()
			for id := range st.Config.Learners {
				if pr, ok := st.Progress[id]; ok && pr.Match >= st.GetCommit() {
					if m, ok := c.members[id]; ok {
						ready = append(ready, m)
					}
				}
			}
		})
		for _, m := range ready {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := n.changeMember(cctx, raftpb.ConfChangeAddNode, m); err != nil {
				n.log.Warn("could not make a caught-up learner a voter; will retry", "member", m.Name, "err", err)
			} else {
				n.log.Info("new member caught up: now a voter", "member", m.Name)
			}
			cancel()
		}
	}
}

// RemoveMember removes the named member from the group. Leader only.
func (n *Node) RemoveMember(ctx context.Context, name string) error {
	for _, m := range n.group.memberList() {
		if m.Name == name {
			return n.changeMember(ctx, raftpb.ConfChangeRemoveNode, m)
		}
	}
	return fmt.Errorf("%w: %q", ErrUnknownMember, name)
}

func (n *Node) changeMember(ctx context.Context, t raftpb.ConfChangeType, m Member) error {
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(m.ID)}},
		Context: encodeContext(m, 0)}
	return n.group.changeMembers(ctx, cc)
}

// TransferLeader hands leadership to the named member, or to the most
// up-to-date other voter if name is "", and returns the new leader's name
// once this node sees it lead (it may be "" if that takes over 2s).
func (n *Node) TransferLeader(ctx context.Context, name string) (string, error) {
	var target uint64
	var found bool
	if err := n.group.control(ctx, func(c *core) {
		st := c.rn.Status()
		var best uint64
		for id, pr := range st.Progress {
			if id == n.id || !hasID(st.Config.Voters[0], id) {
				continue
			}
			if m, ok := c.members[id]; name != "" && ok && m.Name == name {
				target, found = id, true
			}
			if name == "" && (target == 0 || pr.Match > best) {
				target, best, found = id, pr.Match, true
			}
		}
		if found {
			c.rn.TransferLeader(target)
		}
	}); err != nil {
		return "", err
	}
	if !found {
		if name == "" {
			return "", errors.New("no other voter to hand leadership to")
		}
		return "", fmt.Errorf("%w: %q is not a voter", ErrUnknownMember, name)
	}
	deadline := time.After(2 * time.Second)
	for {
		if lead := n.group.status.Load().lead; lead != raft.None && lead != n.id {
			for _, m := range n.group.memberList() {
				if m.ID == lead {
					return m.Name, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-deadline:
			return "", nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}
