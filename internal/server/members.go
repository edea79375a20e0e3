package server

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
)

func (v *service) Members(ctx context.Context, _ *api.MembersRequest) (*api.MembersResponse, error) {
	f := v.s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, status.Errorf(codes.Unavailable, "raft configuration: %v", err)
	}
	_, leader := v.s.raft.LeaderWithID()
	resp := &api.MembersResponse{AnsweredBy: v.s.cfg.NodeID}
	for _, m := range f.Configuration().Servers {
		resp.Members = append(resp.Members, &api.Member{Id: string(m.ID), RaftAddr: string(m.Address),
			Leader: m.ID == leader, Suffrage: m.Suffrage.String()})
	}
	return resp, nil
}

// membershipErr maps a raft membership future's error to a status.
func (v *service) membershipErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return v.s.notLeader()
	}
	return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
}

func (v *service) AddMember(ctx context.Context, r *api.AddMemberRequest) (*api.AddMemberResponse, error) {
	if err := v.s.authorizeAdmin(ctx, "add member"); err != nil {
		return nil, err
	}
	if r.GetId() == "" || r.GetRaftAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "give the new member's id and raft address")
	}
	if err := v.leading(); err != nil {
		return nil, err
	}
	err := v.s.raft.AddVoter(raft.ServerID(r.GetId()), raft.ServerAddress(r.GetRaftAddr()), 0, 10*time.Second).Error()
	if err := v.membershipErr("add member "+r.GetId(), err); err != nil {
		return nil, err
	}
	v.s.log.Warn("member added", "caller", callerAddr(ctx), "id", r.GetId(), "raft_addr", r.GetRaftAddr())
	return &api.AddMemberResponse{}, nil
}

func (v *service) RemoveMember(ctx context.Context, r *api.RemoveMemberRequest) (*api.RemoveMemberResponse, error) {
	if err := v.s.authorizeAdmin(ctx, "remove member"); err != nil {
		return nil, err
	}
	if r.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "give the id of the member to remove")
	}
	if err := v.leading(); err != nil {
		return nil, err
	}
	known := false
	for _, m := range v.s.raft.GetConfiguration().Configuration().Servers {
		known = known || string(m.ID) == r.GetId()
	}
	if !known {
		return nil, status.Errorf(codes.NotFound, "no member %q (see fence members ls)", r.GetId())
	}
	err := v.s.raft.RemoveServer(raft.ServerID(r.GetId()), 0, 10*time.Second).Error()
	if err := v.membershipErr("remove member "+r.GetId(), err); err != nil {
		return nil, err
	}
	v.s.log.Warn("member removed", "caller", callerAddr(ctx), "id", r.GetId())
	return &api.RemoveMemberResponse{}, nil
}

func (v *service) TransferLeader(ctx context.Context, r *api.TransferLeaderRequest) (*api.TransferLeaderResponse, error) {
	if err := v.s.authorizeAdmin(ctx, "transfer leadership"); err != nil {
		return nil, err
	}
	if err := v.leading(); err != nil {
		return nil, err
	}
	if r.GetId() == v.s.cfg.NodeID { // already there: nothing to do
		return &api.TransferLeaderResponse{Leader: v.s.cfg.NodeID}, nil
	}
	var f raft.Future
	if r.GetId() == "" {
		f = v.s.raft.LeadershipTransfer()
	} else {
		var addr raft.ServerAddress
		for _, m := range v.s.raft.GetConfiguration().Configuration().Servers {
			if string(m.ID) == r.GetId() {
				addr = m.Address
			}
		}
		if addr == "" {
			return nil, status.Errorf(codes.NotFound, "no member %q (see fence members ls)", r.GetId())
		}
		f = v.s.raft.LeadershipTransferToServer(raft.ServerID(r.GetId()), addr)
	}
	if err := f.Error(); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "leadership transfer: %v", err)
	}
	// The old leader learns who won from the new leader's first heartbeat.
	_, leader := v.s.raft.LeaderWithID()
	for deadline := time.Now().Add(2 * time.Second); (leader == "" || string(leader) == v.s.cfg.NodeID) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		_, leader = v.s.raft.LeaderWithID()
	}
	return &api.TransferLeaderResponse{Leader: string(leader)}, nil
}

// join asks the members at cfg.Join to add this node, until one (the
// leader) does or the server stops.
func (s *Server) join(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		for _, addr := range s.cfg.Join {
			err := s.askToJoin(ctx, addr)
			if err == nil {
				s.log.Info("joined the cluster", "via", addr)
				return
			}
			if attempt%10 == 0 {
				s.log.Info("asking to join", "via", addr, "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Server) askToJoin(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if s.cfg.AdminToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, AdminHeader, "Bearer "+s.cfg.AdminToken)
	}
	_, err = api.NewFenceClient(conn).AddMember(ctx, &api.AddMemberRequest{Id: s.cfg.NodeID, RaftAddr: string(s.trans.LocalAddr())})
	return err
}
