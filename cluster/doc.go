// Package cluster hides Raft (hashicorp/raft, raft-boltdb v2 log and stable
// store, file snapshots) behind a few methods: Allocate, Set, Join, Forget,
// RenewLease, Leader, WaitForLeader, Status. The state machine (cluster
// identity, tags, members, worker IDs and their leases) lives in Pebble
// through the persist package.
//
// The Raft port carries Raft and the node-to-node requests (allocation,
// SET, joins, leases), told apart by a first byte; clients never reach the
// latter. Allocation happens only on the leader, group-committed into one
// log entry. See DESIGN.md.
package cluster
