package cluster

import (
	"time"

	"github.com/hashicorp/raft"
)

// SetRaftLogFold sets how long Raft's repeated WARN and ERROR messages
// are folded, for the clusters opened after it; it returns the undo.
func SetRaftLogFold(d time.Duration) (undo func()) {
	was := raftLogFold
	raftLogFold = d
	return func() { raftLogFold = was }
}

// TransferLeadershipTo asks c, the leader, to hand its leadership to the
// voter id at its Raft address addr.
func TransferLeadershipTo(c *Cluster, id, addr string) error {
	return c.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error()
}

// ReadLogEntry reads Raft log entry i as Raft does.
func ReadLogEntry(c *Cluster, i uint64) error { return c.timed.GetLog(i, new(raft.Log)) }
