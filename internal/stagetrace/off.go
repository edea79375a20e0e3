//go:build !fence_stagetrace

package stagetrace

import "go.etcd.io/raft/v3/raftpb"

// Mark records that stage happened now for the entry at index (a no-op
// without the fence_stagetrace tag).
func Mark(string, uint64) {}

// Msg marks a MsgApp or MsgAppResp (a no-op without the tag).
func Msg(string, *raftpb.Message) {}

// Msgs marks each of ms as Msg does (a no-op without the tag).
func Msgs(string, []*raftpb.Message) {}

// Writes marks each log write of ms that holds entries (a no-op without the
// tag).
func Writes(string, []*raftpb.Message) {}
