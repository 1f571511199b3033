package cluster

// Restarts and restored copies: a node's lease renewals carry its
// incarnation (the count of its starts, persist.NextIncarnationSync), so
// the cluster knows the latest start each node ran. A node whose directory
// is older than that start (restored from a copy) learns it at its first
// renewal, before it issues anything, and starts above the lease end the
// cluster committed for its worker ID: every ID it issued before lies below
// it, whatever its disk says.

import "context"

// LeaseGrant answers a lease renewal: the committed lease end, and what
// the state machine held before this renewal: the node's latest
// incarnation and its lease end.
type LeaseGrant struct {
	EndMS           int64  `json:"end_ms"`
	PrevIncarnation uint64 `json:"prev_incarnation,omitempty"`
	PrevEndMS       int64  `json:"prev_end_ms,omitempty"`
}

// RenewLeaseAs is RenewLease carrying this node's incarnation (0 carries
// none). The cluster records the largest incarnation it was given.
func (c *Cluster) RenewLeaseAs(ctx context.Context, worker, endMS int64, incarnation uint64) (LeaseGrant, error) {
	if !c.IsLeader() {
		resp, err := c.toLeader(ctx, &request{Op: opLease, Node: c.cfg.NodeID, Worker: worker, Value: endMS, Incarnation: incarnation})
		switch {
		case err != nil:
			return LeaseGrant{}, err
		case resp.Lease == nil:
			return LeaseGrant{EndMS: resp.Value}, nil
		}
		return *resp.Lease, nil
	}
	return c.leaseLocal(c.cfg.NodeID, worker, endMS, incarnation)
}

// RolledBack reports whether a grant says this node's directory is older
// than a start the cluster saw: its incarnation (counted at this start) is
// not above the latest the cluster recorded.
func (g LeaseGrant) RolledBack(incarnation uint64) bool { return g.PrevIncarnation >= incarnation }
