// Package stagetrace times a raft commit stage by stage, for measuring
// only: built with the tag fence_stagetrace, each node appends one line per
// stage ("<unix nanoseconds> <stage> <log index>") to
// $FENCE_STAGETRACE_DIR/stages-<pid>.txt; without the tag every call is an
// empty function the compiler removes. bench/cmd/stages turns the files of
// one run into the median time of each stage after the proposal. The
// stages (internal/node's core.go and group.go) are:
//
//	ready         the entry leaves raft's Ready for a node's log write (on the
//	              leader: its proposal's round)
//	send-app      the leader's loop hands a MsgApp with it to the transport
//	deliver-app   a follower's transport hands that MsgApp to its loop
//	step-app      the follower's loop steps it
//	write-start   a node's log write holding it begins
//	write-done    that write is durable
//	deliver-resp  the leader's transport hands it a follower's MsgAppResp
//	step-resp     the leader's loop steps that answer
//	apply         a node applies the entry
package stagetrace
