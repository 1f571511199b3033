// Package cluster hides Raft (hashicorp/raft, raft-boltdb v2 log and stable
// store, file snapshots, TCP transport) behind a few methods: Allocate,
// Set, Join, Forget, Leader, WaitForLeader. The state machine (tags,
// members, worker IDs) lives in Pebble through the persist package.
//
// Allocation happens only on the leader: a follower forwards it over the
// leader's RESP port (CLUSTER ALLOC), and concurrent allocations are
// group-committed into one log entry. See DESIGN.md.
package cluster
