package cluster

import (
	"errors"

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
