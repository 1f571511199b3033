package cluster

// Status: what CLUSTER INFO, INFO cluster and the metrics report.

import (
	"fmt"
	"strings"

	"github.com/hashicorp/raft"
)

// MemberStatus is one member, as CLUSTER INFO lists it.
type MemberStatus struct {
	NodeID   string
	Worker   int64
	RaftAddr string
	RESPAddr string
	Zone     string
	Suffrage string // voter, nonvoter or none, in this node's latest Raft configuration
	// Health is the leader's autopilot view: healthy, unhealthy (lagging,
	// or not answering), failed (not heard from for --dead-member-after:
	// being removed), or unknown (no leader view yet).
	Health        string
	LastContactMS int64 // since the leader last heard from it; -1 when unknown
	// Version and Commit are the member's build: this node's own, the
	// others' as the leader last heard them; "unknown" when not heard, or
	// from a member too old to say.
	Version, Commit string
	LeaseEndMS      int64 // committed end of its worker lease, ms since the epoch; 0 when it holds none
	// Trails is how many Raft entries the member's log is behind the
	// leader's, as the leader last heard both; -1 when unknown.
	Trails int64
}

// Status is what CLUSTER INFO, INFO and the metrics report.
type Status struct {
	NodeID          string
	ClusterID       string
	Worker          int64           // -1 when this node holds none
	LeaseEndMS      int64           // committed lease end of this node's worker ID, ID time
	Retired         []RetiredWorker // worker IDs this node held before its clock went back (freshworker.go)
	Role            string
	LeaderID        string
	Leader          string // RESP address
	Term            string
	Members         []MemberStatus
	Suffrage        string // in this node's latest Raft configuration: voter, nonvoter or none
	Voters          int    // voters in this node's latest Raft configuration
	MaxVoters       int    // --voters
	Zone            string
	FreeWorkers     int64 // worker IDs no member holds
	AppliedIndex    uint64
	CommitIndex     string
	RaftAddr        string
	AppliesProposed int64
	Disk            DiskStatus // sync and commit latency, slow syncs, leaderships handed off for them
	// FailureTolerance is how many voters the cluster can lose now and
	// keep a quorum: healthy voters beyond a majority of the voters, 0
	// without a leader or a health view.
	FailureTolerance int
	Tags             int // tags in the state, as DBSIZE counts them
	MaxTags          int // the cluster's bound on tags as this node applied it; 0: none
}

// Status reports this node's view of the cluster.
func (c *Cluster) Status() Status {
	if c.IsLeader() {
		// A new leader lists its members once its state machine has applied
		// the log (after a power cut of every node it may be behind: the
		// members that joined lately missing), once per term.
		c.caughtUp()
	}
	st := c.raft.Stats()
	leader, _ := c.Leader()
	_, leaderID := c.raft.LeaderWithID()
	worker, ok := c.Worker()
	if !ok {
		worker = -1
	}
	members := c.fsm.memberList()
	suffrage := map[string]string{}
	voters := 0
	if cf := c.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			suffrage[string(s.ID)] = strings.ToLower(s.Suffrage.String())
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
	}
	health := c.memberHealth()
	var leaderIndex uint64
	if h, ok := health[string(leaderID)]; ok {
		leaderIndex = h.LastIndex
	}
	healthyVoters := 0
	for i, m := range members {
		members[i].Suffrage, members[i].Health, members[i].LastContactMS = "none", "unknown", -1
		members[i].Version, members[i].Commit = "unknown", "unknown"
		members[i].LeaseEndMS, members[i].Trails = c.fsm.lease(m.NodeID), -1
		if m.NodeID == c.cfg.NodeID {
			members[i].Version, members[i].Commit = orUnknown(c.cfg.Version), orUnknown(c.cfg.Commit)
		}
		if s, ok := suffrage[m.NodeID]; ok {
			members[i].Suffrage = s
		}
		if h, ok := health[m.NodeID]; ok {
			members[i].LastContactMS = h.LastContactMS
			if m.NodeID != c.cfg.NodeID {
				members[i].Version, members[i].Commit = orUnknown(h.Version), orUnknown(h.Commit)
			}
			if h.LastIndex > 0 && leaderIndex > 0 {
				members[i].Trails = int64(leaderIndex) - int64(h.LastIndex)
			}
			switch {
			case h.Status == "failed":
				members[i].Health = "failed"
			case h.Healthy:
				members[i].Health = "healthy"
			default:
				members[i].Health = "unhealthy"
			}
		}
		if members[i].Suffrage == "voter" && members[i].Health == "healthy" {
			healthyVoters++
		}
	}
	tolerance := 0
	if leaderID != "" {
		tolerance = max(0, healthyVoters-(voters/2+1))
	}
	return Status{
		NodeID: c.cfg.NodeID, ClusterID: c.ClusterID(), Worker: worker, LeaseEndMS: c.fsm.lease(c.cfg.NodeID), Retired: c.Retired(),
		Role: st["state"], LeaderID: string(leaderID), Leader: leader, Term: st["term"],
		Members: members, Suffrage: c.suffrage(), Voters: voters, MaxVoters: c.cfg.Voters, Zone: c.cfg.Zone, FreeWorkers: c.fsm.freeWorkers(), AppliedIndex: c.fsm.applied(), CommitIndex: st["commit_index"],
		RaftAddr: c.RaftAddr(), AppliesProposed: c.applies.Load(), Disk: c.disk.status(), FailureTolerance: tolerance,
		Tags: c.fsm.size(), MaxTags: c.fsm.maxTags(),
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
	pairs := [][2]string{
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
		// A joiner that reads this line sends its join to raft_addr, on
		// the Raft port's authenticated channel (Cluster.JoinThrough);
		// without it, to the RESP port as CLUSTER JOIN.
		{"join_via", "raft"},
		{"raft_applies_proposed", fmt.Sprint(s.AppliesProposed)},
		{"zone", s.Zone},
		{"raft_voters", fmt.Sprint(s.Voters)},
		{"raft_max_voters", fmt.Sprint(s.MaxVoters)},
		{"worker_ids_free", fmt.Sprint(s.FreeWorkers)},
		{"raft_failure_tolerance", fmt.Sprint(s.FailureTolerance)},
		{"tags", fmt.Sprint(s.Tags)},
		{"max_tags", fmt.Sprint(s.MaxTags)},
	}
	// One line per member, as Redis lists replicas (slave0:ip=...,state=online).
	for i, m := range s.Members {
		pairs = append(pairs, [2]string{fmt.Sprintf("member%d", i), fmt.Sprintf(
			"id=%s,worker=%d,resp=%s,raft=%s,suffrage=%s,health=%s,last_contact_ms=%d,zone=%s,lease_end_ms=%d,trails=%d,version=%s,commit=%s",
			m.NodeID, m.Worker, m.RESPAddr, m.RaftAddr, m.Suffrage, m.Health, m.LastContactMS, m.Zone, m.LeaseEndMS, m.Trails, m.Version, m.Commit)})
	}
	return pairs
}

// orUnknown is s, or "unknown" when empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// FreeWorkers counts the worker IDs no member holds: what joins can take.
func (c *Cluster) FreeWorkers() int64 { return c.fsm.freeWorkers() }

// Applies is the number of log entries this node proposed as leader.
func (c *Cluster) Applies() int64 { return c.applies.Load() }

// TagStoreBytes is what the state machine's Pebble store, where the tags
// are, holds on disk and in memory (persist.Usage), in bytes; 0 and 0
// without a store.
func (c *Cluster) TagStoreBytes() (disk, memory uint64) {
	if c.cfg.Store == nil {
		return 0, 0
	}
	u := c.cfg.Store.Usage()
	return u.Disk, u.Memory()
}

// DiskSpace is the free space on the data directory's file system and the
// reserve below which the store refuses writes, in bytes; ok is false
// where the file system cannot tell.
func (c *Cluster) DiskSpace() (free, reserve uint64, ok bool) {
	if c.cfg.Store == nil {
		return 0, 0, false
	}
	return c.cfg.Store.Space()
}
