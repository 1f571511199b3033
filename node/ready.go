package node

import (
	"errors"
	"fmt"
)

// Ready reports whether the node issues NEXTID now: nil when it does, else
// why not. It fails while the node holds no worker lease that covers the
// wall clock (cut off from its cluster's quorum once the lease it had has
// run out, a restart that could not renew it, a member the cluster
// removed), once the clock went back past the borrow, and once the node
// stops; it passes again as soon as a renewal commits. The readiness probe
// (/healthz?ready) asks it, so that a client Service sends no one to a node
// that answers every NEXTID with TRYAGAIN.
func (n *Node) Ready() error {
	if err := n.conflicted.Load(); err != nil {
		return fmt.Errorf("stopping: %w", *err)
	}
	if n.notMember.Load() {
		return errors.New("not a member: the cluster removed this node")
	}
	if err := n.Gen.CanIssue(); err != nil {
		return fmt.Errorf("cannot issue NEXTID: %w", err)
	}
	return nil
}
