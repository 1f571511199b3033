package cluster

// The timeout budget: every timeout of the cluster, Raft's own included,
// derives from one heartbeat and one election figure, and both scale with
// --raft-timeout-scale.

import (
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
)

// Raft's heartbeat and election timeouts at scale 1.
const (
	BaseHeartbeat = 500 * time.Millisecond
	BaseElection  = 500 * time.Millisecond
)

// MaxTimeoutScale is the largest --raft-timeout-scale.
const MaxTimeoutScale = 20

// Timing is the one place the cluster's timeouts come from: each is derived
// from Raft's heartbeat and election timeouts, and each budget contains the
// ones it waits on (an apply inside a forwarded call inside a client
// request).
type Timing struct {
	// Heartbeat: a follower that hears nothing from its leader for this
	// long (randomized up to twice as long) stands for election.
	Heartbeat time.Duration
	// Election: a candidate that wins no election in this long (randomized
	// up to twice as long) stands again.
	Election time.Duration
	// LeaderLease: a leader that has heard from no quorum for this long
	// steps down.
	LeaderLease time.Duration
	// Commit: the longest an idle leader waits to tell its followers the
	// commit index.
	Commit    time.Duration
	Apply     time.Duration // one raft.Apply, AddVoter or RemoveServer
	Confirm   time.Duration // members confirming they applied a SET
	Call      time.Duration // one node-to-node request, answered after an Apply and a Confirm
	Request   time.Duration // a client request that waits on the cluster
	Autopilot time.Duration // autopilot's update and reconcile interval; a stats request gets half
	// SlowSync: a disk sync (the Raft log's, Pebble's) that takes longer
	// is slow: logged, counted, and a leader whose syncs are slow hands
	// its leadership to another voter (slowdisk.go).
	SlowSync time.Duration
}

// TimingFor is the budget at scale (1 when zero or less): every timeout is
// its value at scale 1 times scale, above the floors that keep an apply
// and a confirmation from timing out on a healthy cluster.
func TimingFor(scale float64) Timing {
	if scale <= 0 {
		scale = 1
	}
	scaled := func(base time.Duration) time.Duration { return time.Duration(float64(base) * scale) }
	return timingFor(scaled(BaseHeartbeat), scaled(BaseElection))
}

// timingFor derives the budget from the Raft timings.
func timingFor(heartbeat, election time.Duration) Timing {
	t := Timing{Heartbeat: heartbeat, Election: election, LeaderLease: heartbeat / 2, Commit: heartbeat / 10}
	t.Apply = max(10*election, 2*time.Second)
	t.Confirm = max(4*election, 2*time.Second)
	t.Call = t.Apply + t.Confirm + 2*election
	t.Request = t.Call + 2*election
	t.Autopilot = max(2*election, time.Second)
	t.SlowSync = 2 * election
	return t
}

// raftConfig is hashicorp/raft's configuration with t's timings. Pre-vote
// stays on: a node that lost touch with its leader (a stall, a busy
// machine) first asks whether it could win, and disrupts a healthy leader
// only if a quorum would vote for it.
func raftConfig(t Timing) *raft.Config {
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout = t.Heartbeat
	rc.ElectionTimeout = t.Election
	rc.LeaderLeaseTimeout = t.LeaderLease
	rc.CommitTimeout = t.Commit
	rc.PreVoteDisabled = false
	return rc
}

// startTimer logs, at debug level, how long each step of a start took
// since the one before: took(step) names the step that just ended.
func startTimer(log *slog.Logger) (took func(step string)) {
	last := time.Now()
	return func(step string) {
		now := time.Now()
		log.Debug("start step", "step", step, "took", now.Sub(last).Round(time.Microsecond))
		last = now
	}
}
