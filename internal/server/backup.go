package server

import (
	"crypto/sha256"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/buildinfo"
)

// backupChunk is the size of the state's pieces in a Backup stream.
const backupChunk = 1 << 20

// Backup streams a consistent copy of the state (see the proto): a
// linearizable read, then the state as of the entry applied last, in
// backupChunk pieces after a header with its size and SHA-256.
func (v *service) Backup(_ *api.BackupRequest, stream api.FenceService_BackupServer) error {
	ctx := stream.Context()
	if err := v.leading(); err != nil {
		return err
	}
	b, err := v.s.node.Backup(ctx)
	if err != nil {
		return v.s.readErr(ctx, err)
	}
	sum := sha256.Sum256(b.State)
	h := &api.BackupHeader{ClusterId: b.ClusterID, NodeId: v.s.cfg.NodeID, Index: b.Index, Term: b.Term,
		TakenAt: timestamppb.New(b.TakenAt), Token: b.Token, Leases: uint64(b.Leases), Locks: uint64(b.Locks),
		Size: uint64(len(b.State)), Sha256: sum[:], Version: buildinfo.Get().Version}
	if err := stream.Send(&api.BackupResponse{Header: h}); err != nil {
		return err
	}
	for off := 0; off < len(b.State); off += backupChunk {
		if err := stream.Send(&api.BackupResponse{Data: b.State[off:min(off+backupChunk, len(b.State))]}); err != nil {
			return err
		}
	}
	v.s.log.Info("backup sent", "caller", callerAddr(ctx), "index", b.Index, "token", b.Token, "bytes", len(b.State),
		"cluster", fmt.Sprintf("%016x", b.ClusterID))
	return nil
}
