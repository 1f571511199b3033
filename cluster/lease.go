package cluster

// Worker IDs and their leases.

import (
	"context"
)

// RenewLease asks the cluster to extend this node's lease on its worker ID
// to endMS (ID time) and returns the committed end. It fails with
// ErrNotMember when the node no longer holds the worker ID.
func (c *Cluster) RenewLease(ctx context.Context, worker, endMS int64) (int64, error) {
	g, err := c.RenewLeaseAs(ctx, worker, endMS, 0)
	return g.EndMS, err
}

func (c *Cluster) leaseLocal(node string, worker, endMS int64, incarnation uint64) (LeaseGrant, error) {
	e := newEntry(entryLease).string(node).varint(worker).varint(endMS)
	if incarnation > 0 {
		e = e.uvarint(incarnation)
	}
	resp, err := c.apply(e)
	if err != nil {
		return LeaseGrant{}, err
	}
	lr, err := applyAnswer[leaseResult](resp, "lease")
	if err != nil {
		return LeaseGrant{}, err
	}
	return LeaseGrant{EndMS: lr.EndMS, PrevIncarnation: lr.PrevIncarnation, PrevEndMS: lr.PrevEndMS}, lr.Err
}

// Lease is this node's committed lease end as its state machine has it (0
// when it holds no worker ID there): what a restarted node may use before
// it renews.
func (c *Cluster) Lease() int64 { return c.fsm.lease(c.cfg.NodeID) }

// nowMS is the wall clock in ID time.
func (c *Cluster) nowMS() int64 { return c.cfg.Now().UnixMilli() - c.cfg.Layout.Epoch.UnixMilli() }

// Worker is this node's worker ID from the state machine, if it has one.
func (c *Cluster) Worker() (int64, bool) {
	m, ok := c.fsm.member(c.cfg.NodeID)
	return m.Worker, ok
}
