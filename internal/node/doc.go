// Package node is one fence node's share of the raft group: the raft loop
// (go.etcd.io/raft/v3), its durable log (internal/raftstore) and transport
// (internal/transport), the replicated fsm.State, the proposer that packs
// commands into entries, the lessor (the leader's time-driven duties) and
// the waiters of blocked acquires. The gRPC service (internal/server) uses
// only Node's methods: Propose, ProposeEntry, Read, View, Wait/Leave,
// Deadline, Ready/WaitReady, Leader, the membership calls and Snapshot.
//
// # The core
//
// core wraps a RawNode with CheckQuorum, PreVote, ReadIndex reads
// (ReadOnlySafe), no proposal forwarding, and AsyncStorageWrites: raft hands
// its log writes out as messages, and the messages that depend on a write
// (a follower's vote or append response, the leader's own acknowledgement)
// are released only once it is durable. The leader sends new entries to
// its followers while it writes them itself (Raft thesis §10.2.1). core has
// no goroutines: production drives it from group's loop, the simulation
// (sim_test.go) from one goroutine with a simulated network, clock and disk.
//
// An entry's data is an 8-byte proposal id and an fsm batch; the proposing
// node finds its waiting request by the id when the entry is applied. An
// empty entry is a new leader's first: when it is applied this node has
// applied everything before its term, and its leader duties start (no
// barrier round). Conf change entries carry the member (name, raft
// address) in their context; snapshots carry the member list before the
// fsm's encoding (members.go).
//
// # Goroutines
//
//   - the loop (group.loop) drives the core: it ticks raft, steps messages
//     from the transport, takes proposals and reads, applies committed
//     entries (to the replica, under its write lock), answers proposals
//     and reads, hands messages to the transport and log writes to the
//     append worker. It never waits on the network. A message from the
//     network that finds the loop idle (group.running free, the inbox
//     empty) is stepped by the transport's reader that received it, which
//     then runs the round the loop would have run (group.stepNow): a lone
//     commit's MsgApp, its follower's write and answer, and the answer's
//     commit on the leader cost no hand-off to a loop.
//   - the append worker (group.appendWorker) performs a leader's log
//     writes in order (Log.Append, fsync) and the snapshot saves; once a
//     write is durable it sends the write's responses to other members
//     and hands the write back to the loop, which steps the local ones. A
//     follower's loop writes itself when the worker is idle (group.
//     writesInline): it has nothing to do meanwhile that two hand-offs
//     would not delay more; so does a leader's loop for a write without
//     entries (the commit index moving, which is not synced). A
//     failed write stops the node (the loop and the worker end; callers
//     get the error).
//   - the proposer is no goroutine: callers queue commands and wait; the
//     loop takes them in batches (proposer.next), at most
//     maxInflightBatches unanswered, and answers a batch's callers when it
//     applies the batch's entry (request.then). A caller that finds the
//     loop idle runs that round itself (group.kick): its batch goes to
//     raft, and its MsgApps to the followers, from its own goroutine.
//   - the lessor (lessor.run) ticks while this node leads: Tick, Expire and
//     GrantNext commands through the proposer. Its builder (lessor.builds)
//     builds a new leader's lease deadlines after it starts serving, a
//     chunk per hold of the replica's read lock.
//   - promoteLearners makes caught-up learners voters while this node leads.
//   - recordAddrs, while this node leads, records the members' client
//     addresses (its own, and those its peers gave in their raft stream
//     handshakes: addrBook) in the replicated state: on takeover, when one
//     changes, and every addrRetry while one is not recorded yet.
//   - the transport's goroutines call Node's deliver and report callbacks;
//     gRPC handlers call Node's methods.
//
// # Who owns what
//
//   - core and the RawNode: whoever holds group.running (the loop for each
//     of its turns, or a transport reader in stepNow). Other goroutines
//     reach them through group.control (run a function on the loop and
//     wait). "The loop" below means that holder.
//   - the Log: the append worker writes (and the loop, writesInline); the
//     raft library reads it from the loop through raft.Storage (the
//     store's memory view has its own lock).
//   - replica.state: written by the loop (apply, restore) under replica.mu;
//     read by anyone under its read lock (View, Read, gauges, the lessor's
//     activation).
//   - lessor fields: lessor.mu. waiters: waiters.mu. group.ms (the member
//     list for readers off the loop): group.mu. group.status: an atomic
//     pointer the loop replaces after every round.
//
// # Lock order
//
// group.running first: its holder runs the core, which takes the others.
// Nothing is called with it held that waits for the loop (the apply path's
// callbacks never do), and a deliver only tries it (TryLock).
//
// replica.mu, then lessor.mu or waiters.mu (the apply path calls the
// lessor and the waiters with the replica locked; leadership activation
// and the lessor's builder take the replica's read lock, then the lessor's). group.mu, proposer.mu
// and the queues' locks are leaves: nothing is locked while holding them. No
// lock is held across a channel operation that can block, except the loop's
// control functions, which run on the loop itself.
package node
