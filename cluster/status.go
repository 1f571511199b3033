package cluster

// Status: what CLUSTER INFO, INFO cluster and the metrics report.

import (
	"fmt"
	"strings"
)

// MemberStatus is one member, as CLUSTER INFO lists it.
type MemberStatus struct {
	NodeID   string
	Worker   int64
	RaftAddr string
	RESPAddr string
}

// Status is what CLUSTER INFO, INFO and the metrics report.
type Status struct {
	NodeID          string
	ClusterID       string
	Worker          int64           // -1 when this node holds none
	LeaseEndMS      int64           // committed lease end of this node's worker ID, ID time
	Retired         []RetiredWorker // worker IDs this node held before its clock went back (fresh.go)
	Role            string
	LeaderID        string
	Leader          string // RESP address
	Term            string
	Members         []MemberStatus
	Suffrage        string // in this node's latest Raft configuration: voter, nonvoter (a joiner not yet promoted) or none
	AppliedIndex    uint64
	CommitIndex     string
	RaftAddr        string
	AppliesProposed int64
}

// Status reports this node's view of the cluster.
func (c *Cluster) Status() Status {
	st := c.raft.Stats()
	leader, _ := c.Leader()
	_, leaderID := c.raft.LeaderWithID()
	worker, ok := c.Worker()
	if !ok {
		worker = -1
	}
	return Status{
		NodeID: c.cfg.NodeID, ClusterID: c.ClusterID(), Worker: worker, LeaseEndMS: c.fsm.lease(c.cfg.NodeID), Retired: c.Retired(),
		Role: st["state"], LeaderID: string(leaderID), Leader: leader, Term: st["term"],
		Members: c.fsm.memberList(), Suffrage: c.suffrage(), AppliedIndex: c.fsm.applied(), CommitIndex: st["commit_index"],
		RaftAddr: c.RaftAddr(), AppliesProposed: c.applies.Load(),
	}
}

// Info is Status as the key:value lines of CLUSTER INFO and INFO cluster.
func (c *Cluster) Info() [][2]string { return c.Status().Pairs() }

// Pairs renders the status as key:value pairs.
func (s Status) Pairs() [][2]string {
	w := "none"
	if s.Worker >= 0 {
		w = fmt.Sprint(s.Worker)
	}
	list := make([]string, len(s.Members))
	for i, m := range s.Members {
		list[i] = fmt.Sprintf("%s=%d@%s", m.NodeID, m.Worker, m.RESPAddr)
	}
	return [][2]string{
		{"node_id", s.NodeID},
		{"cluster_id", s.ClusterID},
		{"worker_id", w},
		{"worker_lease_end_ms", fmt.Sprint(s.LeaseEndMS)},
		{"worker_retired", retiredPairs(s.Retired)},
		{"role", s.Role},
		{"leader_id", s.LeaderID},
		{"leader", s.Leader},
		{"term", s.Term},
		{"members", fmt.Sprint(len(s.Members))},
		{"member_list", strings.Join(list, ",")},
		{"raft_suffrage", s.Suffrage},
		{"applied_index", fmt.Sprint(s.AppliedIndex)},
		{"commit_index", s.CommitIndex},
		{"raft_addr", s.RaftAddr},
		{"raft_applies_proposed", fmt.Sprint(s.AppliesProposed)},
	}
}

// Applies is the number of log entries this node proposed as leader.
func (c *Cluster) Applies() int64 { return c.applies.Load() }
