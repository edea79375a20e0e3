// Package raftstore keeps a raft node's durable state on disk with etcd's
// own storage packages (go.etcd.io/etcd/server/v3 storage/wal and
// etcdserver/api/snap) and shows it to the raft library (go.etcd.io/raft/v3)
// as a raft.Storage held in memory.
//
// # Layout
//
// A store lives in one directory:
//
//	dir/wal/   etcd's write-ahead log: segment files
//	           <seq>-<first index>.wal (hex), each starting with the metadata
//	           given to Create and the hard state current when it was cut,
//	           followed by entry, hard state and snapshot records, each with
//	           a CRC chained to the one before it.
//	dir/snap/  etcd's snapshot files <term>-<index>.snap (hex), one per
//	           snapshot, each protected by its own CRC.
//
// The WAL is the source of truth. A snapshot file is used only if the WAL
// holds a snapshot record with the same index and term, and only if that
// index is at or below the commit index of the WAL's last hard state
// (wal.ValidSnapshotEntries). Open loads the newest snapshot that passes
// that test and reads back (snap.LoadNewestAvailable), opens the WAL at it
// (wal.Open, ReadAll), and takes the hard state and the entries after it.
//
// # Replay
//
// The entries do not come from wal.ReadAll as they are: in two cases it
// returns entries raft had already dropped (etcd issue 22442). An entry
// that overwrote a deposed leader's tail at or below the snapshot's index
// is skipped, and with it the truncation it stood for; and a snapshot from
// the leader replaces the log without the WAL truncating anything, so a
// stale tail above its index comes back if no entry followed it. Either
// would let the node vote, or match a leader's append, on entries it does
// not have. Open therefore replays the WAL's records itself, with etcd's
// decoder, applying raft's truncation to every entry and restarting the
// log at every valid snapshot record whose entry the log does not hold
// (the store's own snapshots always name an entry it holds; a received one
// never does, as raft replaces only a log that does not match).
//
// # Durability
//
// Append and SaveSnapshot return only once what they were given is on disk
// (fdatasync of the WAL; fsync of a snapshot file and of its directory).
// Unlike etcd, an Append that changes only the commit index is synced too
// (wal.Save leaves it in its buffer), so every hard state Append accepted
// survives a crash. Each call writes in an order that leaves a usable log
// at every point a crash can stop it: a snapshot file before the WAL
// record naming it, that record before the hard state that makes it valid,
// and that hard state before the entries that follow the snapshot. A crash
// in the middle of an Append can leave a prefix of that Append's entries
// written (which replaces the old entries from the first one's index on,
// as the whole Append would); it never damages what earlier calls wrote.
// The crash tests kill a writing process with SIGKILL; that an fsynced
// write survives a power cut is the file system's and the disk's promise.
//
// A crash can also leave a torn record at the end of the last WAL segment.
// Open cuts it off (wal.Repair, which keeps a copy of the segment as
// <name>.wal.broken), says so in the log, and goes on; everything written
// before the torn record is kept. Damage anywhere else (a CRC mismatch in
// the middle of the log, a missing segment, a gap in the entries) is not
// repaired: Open returns an error naming it. A snapshot file that cannot be
// read is renamed <name>.snap.broken by etcd and Open falls back to the
// next older valid snapshot; the WAL is kept back to the oldest snapshot
// file the store keeps, so that fallback finds the entries it needs.
//
// # Memory view
//
// After Open the memory view holds exactly what the disk does: the loaded
// snapshot's metadata, the last hard state, and the entries after the
// snapshot. A snapshot's data is not kept in memory: Snapshot reads it
// from the snapshot file each time it is called (raft calls it to send
// the snapshot to a follower that fell behind), so a node holding a
// million leases does not keep a second copy of its state's encoding. Each
// Append and SaveSnapshot changes the disk first and the memory view after,
// so raft never sees an entry or hard state that is not durable. The one
// difference between a store's memory view and what Open would rebuild is
// the number of entries kept before the snapshot: SaveSnapshot keeps
// `trailing` of them in memory, while Open starts the log right after the
// snapshot, as etcd does.
//
// # Commit index
//
// The commit index written to disk never goes down, and it is at least the
// index of every snapshot recorded: SaveSnapshot and a snapshot passed to
// Append raise it if needed (an applied or snapshotted index is committed),
// so that the snapshot record is valid for ValidSnapshotEntries even when
// the application applied entries before the hard state naming their
// commit was written (raft's asynchronous storage writes allow that).
package raftstore
