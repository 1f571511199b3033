package cluster

import (
	"errors"
	"time"

	"idserver/engine"
)

// Errors of the cluster. An error that crossed from another node keeps its
// sentinel (the internal channel carries a code, never text to match), so
// errors.Is works the same for a local and a forwarded request.
var (
	// ErrNoLeader: the request needs the Raft leader and none can be
	// reached (TRYAGAIN on the wire). It is the engine's, so that the
	// segment buffers and the wire treat it as one error.
	ErrNoLeader = engine.ErrNoLeader
	// ErrRefused: a join, forget or other membership change was refused; the
	// text names both sides and the remedy, and nothing changed.
	ErrRefused = errors.New("refused")
	// ErrNotMember: the node is not (or no longer) a member, or does not
	// hold the worker ID it asks a lease for.
	ErrNotMember = errors.New("not a member")
	// ErrUnconfirmed: a member did not confirm a SET in time (that it
	// dropped its buffered values below the floor, before the commit, or
	// that it applied the floor, after it); SET is idempotent, so a retry
	// is safe.
	ErrUnconfirmed = errors.New("not confirmed by every member")
	// ErrAuth: the other end of a connection to a Raft port did not prove
	// it knows the cluster secret.
	ErrAuth = errors.New("wrong cluster secret")
)

// Timing is the one place the cluster's timeouts come from: each is derived
// from Raft's election timeout, and each budget contains the ones it waits
// on (an apply inside a forwarded call inside a client request).
type Timing struct {
	Heartbeat time.Duration
	Election  time.Duration
	Apply     time.Duration // one raft.Apply, AddVoter or RemoveServer
	Confirm   time.Duration // members confirming they applied a SET
	Call      time.Duration // one node-to-node request, answered after an Apply and a Confirm
	Request   time.Duration // a client request that waits on the cluster
	Autopilot time.Duration // autopilot's update and reconcile interval; a stats request gets half
}

// timingFor derives the budget from the Raft timings.
func timingFor(heartbeat, election time.Duration) Timing {
	t := Timing{Heartbeat: heartbeat, Election: election}
	t.Apply = max(10*election, 2*time.Second)
	t.Confirm = max(4*election, 2*time.Second)
	t.Call = t.Apply + t.Confirm + time.Second
	t.Request = t.Call + time.Second
	t.Autopilot = max(2*election, time.Second)
	return t
}
