package node

// A start on a restored copy of a data directory must not issue again what
// the node issued after the copy was taken. Two checks run before anything
// is issued:
//
//   - The directory marker (persist.CheckCopy): a copy made file by file
//     (cp -a, rsync, tar) has a new marker file. A one-node cluster has
//     nothing outside its disk to ask, so it refuses to start and names
//     the remedy (idserver restore). A member of a larger cluster takes the
//     rollback path below.
//   - The incarnation: the first lease renewal of this start carries the
//     start's number; the cluster answers the latest number it recorded and
//     the lease end it committed. A number the cluster already saw means the
//     directory is older than a start that ran (a copy of any kind, a
//     file-system snapshot included, restored after the node restarted).
//
// The rollback path starts the generator above the lease end the cluster
// committed for the worker ID: every ID the worker ever issued lies below
// it. Segments need nothing: they come from the leader's state machine.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"idserver/cluster"
)

// checkCopy refuses a one-node cluster's directory that is a copy, and
// tells a member of a larger cluster that it is one ("" when it is not):
// the plan's restored copy.
func (n *Node) checkCopy() (string, error) {
	copied := n.plan.copied
	if copied == "" {
		return "", nil
	}
	if n.Cluster.Alone() {
		return "", fmt.Errorf("refusing to start: %s. A copy may be older than what this node issued, and would issue those "+
			"values and IDs again. To start from it safely, stop here, move it aside and restore it: "+
			"mv %s %s.copy && idserver restore %s.copy --dir %s (every tag and the time high-water move past what could have "+
			"been issued since)", copied, n.cfg.Dir, n.cfg.Dir, n.cfg.Dir, n.cfg.Dir)
	}
	n.log.Warn("this data directory is a copy: the node starts above what the cluster committed for it", "why", copied)
	return copied, nil
}

// startLease makes the first lease renewal of this start, carrying its
// incarnation, before the generator exists, and returns the ID time the
// generator starts above and the lease end. On a directory older than what
// the cluster recorded, or a copy, the start moves above the worker's
// committed lease end. If the cluster cannot be reached in time, a
// directory that is not a known copy starts from its own state (as before;
// the background renewals carry the incarnation) and a copy is refused.
func (n *Node) startLease(ctx context.Context, worker, startAbove, lease int64, copied string) (int64, int64, error) {
	inc, err := n.Store.NextIncarnationSync()
	if err != nil {
		return 0, 0, err
	}
	n.incarnation.Store(inc)
	hw, err := n.Store.HighWater()
	if err != nil {
		return 0, 0, err
	}
	leaseMS := n.cfg.WorkerLease.Milliseconds()
	start := max(n.nowMS(), hw+1, startAbove+1)
	wait := joinWait / 6
	if n.checkInLater {
		wait = 0 // the check-in already waited for a cluster it could not reach
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	g, err := n.renewUntil(ctx, worker, start+leaseMS, inc)
	switch {
	case err != nil && copied != "":
		return 0, 0, fmt.Errorf("refusing to start: this data directory is a copy (%s) and the cluster could not be asked "+
			"what this node issued before: %w", copied, err)
	case errors.Is(err, cluster.ErrNotMember):
		return 0, 0, err
	case err != nil:
		n.log.Warn("could not renew the worker lease at start: serving from this directory's state", "err", err)
		return startAbove, lease, nil
	}
	n.leaseChecked.Store(true)
	if !g.RolledBack(inc) && copied == "" {
		return startAbove, max(lease, g.EndMS), n.Store.RecordMarkerSync()
	}
	// The rollback path: above everything the worker issued, and a start
	// count above the cluster's so that the next start is a plain one.
	n.log.Warn("this data directory is older than what the cluster committed for this node (restored from a copy?): "+
		"starting above the worker's committed lease end", "incarnation_on_disk", inc-1, "incarnation_in_cluster", g.PrevIncarnation,
		"copy", copied, "start_above_ms", max(startAbove, g.PrevEndMS), "disk_start_ms", start)
	startAbove = max(startAbove, g.PrevEndMS)
	inc = max(inc, g.PrevIncarnation) + 1
	if err := n.Store.SetIncarnationSync(inc); err != nil {
		return 0, 0, err
	}
	n.incarnation.Store(inc)
	if g, err = n.renewUntil(ctx, worker, max(start, startAbove+1)+leaseMS, inc); err != nil {
		return 0, 0, fmt.Errorf("refusing to start: this data directory is older than what the cluster committed for this node, "+
			"and the lease above it could not be committed: %w", err)
	}
	if copied != "" {
		if err := n.Store.RenewMarkerSync(); err != nil {
			return 0, 0, err
		}
	}
	return startAbove, g.EndMS, nil
}

// renewUntil renews the lease, retrying while there is no leader, until
// ctx ends.
func (n *Node) renewUntil(ctx context.Context, worker, endMS int64, inc uint64) (cluster.LeaseGrant, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, n.Cluster.Timing().Call)
		g, err := n.Cluster.RenewLeaseAs(rctx, worker, endMS, inc)
		cancel()
		if err == nil || errors.Is(err, cluster.ErrNotMember) {
			return g, err
		}
		select {
		case <-ctx.Done():
			return g, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nowMS is the wall clock in ID time.
func (n *Node) nowMS() int64 { return n.cfg.Now().UnixMilli() - n.cfg.Layout.Epoch.UnixMilli() }
