package cluster

import "time"

// SetRaftLogFold sets how long Raft's repeated WARN and ERROR messages
// are folded, for the clusters opened after it; it returns the undo.
func SetRaftLogFold(d time.Duration) (undo func()) {
	was := raftLogFold
	raftLogFold = d
	return func() { raftLogFold = was }
}
