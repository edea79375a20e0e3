// Package planted holds the switches of deliberately planted bugs. They exist
// only so the chaos harness (test/chaos) and the simulation can prove they
// catch each one. Every
// switch is the constant false unless the binary is built with that bug's
// tag, so a normal build compiles the buggy branches away:
//
//	fence_bug_regrant   Regrant: a lock is handed to a waiter whose lease has
//	                    already ended (etcd#11456).
//	fence_bug_token     TokenRestart: a restored node rebuilds the token
//	                    counter from the highest token its fenced key-value
//	                    store accepted, lower than tokens already issued.
//	fence_bug_deposed   DeposedRenewal: a node that led once keeps answering
//	                    renewals from memory after it lost leadership.
//	fence_bug_replay    ReplayExecuted: a lease's call that its client has
//	                    acknowledged is executed again when it arrives late,
//	                    instead of refused (the hole call numbers close).
//	fence_bug_applyuncommitted
//	                    ApplyUncommitted (the engine boundary): a node
//	                    applies log entries as soon as they are written to
//	                    its log, before raft says they are committed.
//
// The chaos harness (test/chaos) catches the first four; the deterministic
// simulation (internal/node, TestSimulation) catches regrant, token, replay
// and applyuncommitted.
package planted
