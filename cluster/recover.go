package cluster

// Recovery: --recover restarts a cluster from one surviving member.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// recoverAlone commits, as the only voter, that the other members are gone.
func (c *Cluster) recoverAlone() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.Call)
	defer cancel()
	for !c.IsLeader() {
		select {
		case <-ctx.Done():
			return errors.New("recover: this node did not become leader of its one-node configuration")
		case <-time.After(20 * time.Millisecond):
		}
	}
	skip := c.cfg.RecoverSkip
	if skip <= 0 {
		skip = 1_000_000_000_000
	}
	id := c.ClusterID()
	if _, err := c.apply(newEntry(entryRecover).string(c.cfg.NodeID).varint(c.nowMS()).varint(skip).
		varint(10 * c.cfg.WorkerLease.Milliseconds()).string(id)); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	c.log.Warn("recovered the cluster alone, under a new cluster ID: the other members are forgotten, every tag skipped ahead", "cluster_id", id,
		"skip_values", skip, "skip_lease_ms", 10*c.cfg.WorkerLease.Milliseconds())
	return nil
}
