package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/node"
)

// Members answers with the leader's view (it alone knows each member's
// progress): a follower that knows the leader's address sends the caller
// there; without a leader, a node answers with its own view.
func (v *service) Members(ctx context.Context, _ *api.MembersRequest) (*api.MembersResponse, error) {
	if id, _, addr := v.s.node.Leader(); !v.s.Ready() && id != "" && id != v.s.cfg.NodeID && addr != "" {
		return nil, v.s.notLeader()
	}
	ms, err := v.s.node.Members(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "raft configuration: %v", err)
	}
	resp := &api.MembersResponse{AnsweredBy: v.s.cfg.NodeID}
	for _, m := range ms {
		contact := int64(-1)
		if m.LastContact >= 0 {
			contact = m.LastContact.Milliseconds()
		}
		role, suffrage := api.Role_ROLE_FOLLOWER, api.Suffrage_SUFFRAGE_VOTER
		if m.Leader {
			role = api.Role_ROLE_LEADER
		}
		if m.Learner {
			suffrage = api.Suffrage_SUFFRAGE_LEARNER
		}
		var grpcAddr string
		v.s.node.View(func(st *fsm.State) { grpcAddr, _ = st.NodeAddr(m.Name) })
		resp.Members = append(resp.Members, &api.Member{Id: m.Name, RaftAddr: m.RaftAddr, GrpcAddr: grpcAddr, Role: role, Suffrage: suffrage,
			MatchIndex: m.Match, Lag: m.Lag, Active: m.Active, LastContactMs: contact})
	}
	return resp, nil
}

// membershipErr maps a membership change's error to a status.
func (v *service) membershipErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, node.ErrNotLeader), errors.Is(err, node.ErrIndeterminate), errors.Is(err, node.ErrStopped):
		return v.s.notLeader()
	case errors.Is(err, node.ErrUnknownMember):
		return status.Errorf(codes.NotFound, "%s: %v (see fence members ls)", what, err)
	case errors.Is(err, node.ErrMemberExists):
		return status.Errorf(codes.AlreadyExists, "%s: %v", what, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", what, err)
	}
	return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
}

func (v *service) AddMember(ctx context.Context, r *api.AddMemberRequest) (*api.AddMemberResponse, error) {
	if err := validMember(r.GetId(), r.GetRaftAddr()); err != nil {
		return nil, err
	}
	if err := v.leading(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := v.s.node.AddMember(ctx, r.GetId(), r.GetRaftAddr())
	if err := v.membershipErr("add member "+r.GetId(), err); err != nil {
		return nil, err
	}
	v.s.log.Warn("member added", "caller", callerAddr(ctx), "id", r.GetId(), "raft_addr", r.GetRaftAddr())
	resp := &api.AddMemberResponse{ClusterId: info.ClusterID}
	for _, m := range info.Members {
		resp.Members = append(resp.Members, &api.Member{Id: m.Name, RaftAddr: m.RaftAddr})
	}
	return resp, nil
}

// validMember checks a new member's id and raft address.
func validMember(id, raftAddr string) error {
	if id == "" || raftAddr == "" {
		return status.Error(codes.InvalidArgument, "give the new member's id and raft address")
	}
	if err := name("member id", id); err != nil {
		return err
	}
	if len(raftAddr) > 255 {
		return status.Errorf(codes.InvalidArgument, "raft address is %d bytes; at most 255", len(raftAddr))
	}
	return nil
}

func (v *service) RemoveMember(ctx context.Context, r *api.RemoveMemberRequest) (*api.RemoveMemberResponse, error) {
	if r.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "give the id of the member to remove")
	}
	if err := v.leading(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := v.membershipErr("remove member "+r.GetId(), v.s.node.RemoveMember(ctx, r.GetId())); err != nil {
		return nil, err
	}
	v.s.log.Warn("member removed", "caller", callerAddr(ctx), "id", r.GetId())
	return &api.RemoveMemberResponse{}, nil
}

func (v *service) TransferLeader(ctx context.Context, r *api.TransferLeaderRequest) (*api.TransferLeaderResponse, error) {
	if err := v.leading(); err != nil {
		return nil, err
	}
	if r.GetId() == v.s.cfg.NodeID { // already there: nothing to do
		return &api.TransferLeaderResponse{Leader: v.s.cfg.NodeID}, nil
	}
	leader, err := v.s.node.TransferLeader(ctx, r.GetId())
	if err := v.membershipErr("leadership transfer", err); err != nil {
		return nil, err
	}
	return &api.TransferLeaderResponse{Leader: leader}, nil
}

// join asks the members at cfg.Join to add this node, until one (the
// leader) does, and returns what the node needs to start. It gives up after
// JoinTimeout.
func (s *Server) join() (*node.JoinInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.JoinTimeout)
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		for _, addr := range s.cfg.Join {
			info, err := s.askToJoin(ctx, addr)
			if err == nil {
				s.log.Info("joined the cluster", "via", addr, "cluster", fmt.Sprintf("%016x", info.ClusterID), "members", len(info.Members))
				return info, nil
			}
			last = err
			if attempt%10 == 0 {
				s.log.Info("asking to join", "via", addr, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("join via %v: no member added this node within %v: %w", s.cfg.Join, s.cfg.JoinTimeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Server) askToJoin(ctx context.Context, addr string) (*node.JoinInfo, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(s.clientCreds(addr)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 35*time.Second)
	defer cancel()
	if s.cfg.AdminToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, AdminHeader, "Bearer "+s.cfg.AdminToken)
	}
	resp, err := api.NewFenceServiceClient(conn).AddMember(ctx, &api.AddMemberRequest{Id: s.cfg.NodeID, RaftAddr: s.AdvertisedRaftAddr()})
	if err != nil {
		return nil, err
	}
	if resp.GetClusterId() == 0 {
		return nil, fmt.Errorf("member at %s answered without a cluster id: it runs an older fence", addr)
	}
	info := &node.JoinInfo{ClusterID: resp.GetClusterId()}
	for _, m := range resp.GetMembers() {
		info.Members = append(info.Members, node.Member{Name: m.GetId(), RaftAddr: m.GetRaftAddr()})
	}
	return info, nil
}
