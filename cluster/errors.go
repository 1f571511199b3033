package cluster

import (
	"errors"
	"fmt"

	"idserver/engine"
)

// Errors of the cluster. An error that crossed from another node keeps its
// sentinel (the internal channel carries a code, never text to match), so
// errors.Is works the same for a local and a forwarded request.
var (
	// ErrNoLeader: the request needs the Raft leader and none can be
	// reached (TRYAGAIN on the wire). It is the engine's, so that the
	// segment buffers and the wire treat it as one error. Every such
	// error is an *engine.NoLeaderError whose Cause is one of the four
	// below, or the engine's ErrLeaseEnded or ErrRefillLate; errors.Is
	// matches ErrNoLeader for any cause, and the cause by itself.
	ErrNoLeader = engine.ErrNoLeader
	// ErrLeaderUnknown: no leader is known, or none answers.
	ErrLeaderUnknown = errors.New("no leader known")
	// ErrNotLeader: the node the request reached does not lead, or lost
	// or hands over the leadership before the request committed.
	ErrNotLeader = errors.New("not the leader")
	// ErrLeadershipUnconfirmed: the leader cannot confirm with a quorum
	// that it still leads (a read on it would not be linearizable).
	ErrLeadershipUnconfirmed = errors.New("leadership not confirmed")
	// ErrNotApplied: the entry or configuration change was not applied
	// within the apply budget, or its answer was lost; if it committed it
	// is applied later, an outcome the caller does not learn.
	ErrNotApplied = errors.New("not applied in time")
	// ErrRefused: a join, forget or other membership change was refused; the
	// text names both sides and the remedy, and nothing changed.
	ErrRefused = errors.New("refused")
	// ErrRemoved: a join refused because the cluster removed the node (a
	// CLUSTER FORGET, or dead for --dead-member-after) while its data
	// directory kept its worker ID; restarted, it joins again as a new
	// member. Such an error is ErrRefused too.
	ErrRemoved = errors.New("removed from the cluster")
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

// noLeader is ErrNoLeader for cause, with its detail formatted.
func noLeader(cause error, format string, args ...any) error {
	return &engine.NoLeaderError{Cause: cause, Detail: fmt.Sprintf(format, args...)}
}
