package cluster

// Recovery: --recover restarts a cluster from one surviving member, only
// once the others are really gone, and only once.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"idserver/persist"
)

// mayRecover decides whether this start recovers the cluster alone. It
// refuses while another member of this node's cluster answers on its Raft
// address (the cluster is not lost: recovering would give that member's
// worker ID to the next joiner while it still issues). It runs once: a node
// alone in the cluster it recovered (its store records the recovery) has
// nothing to recover, and the flag is ignored, loudly, with no second skip.
// A node alone that never recovered recovers: the skip is what makes a
// directory restored from a backup safe.
func (c *Cluster) mayRecover(existing bool, logs raft.LogStore, snaps raft.SnapshotStore) (bool, error) {
	if !existing {
		return false, errors.New("--recover needs the data directory of a surviving member")
	}
	others := c.otherMembers(logs, snaps)
	last, done, err := c.cfg.Store.LastRecovery()
	if err != nil {
		return false, err
	}
	if len(others) == 0 && done && last.To == c.ClusterID() {
		c.log.Error("--recover IGNORED: nothing to recover, this node already recovered its cluster and is its only member; "+
			"remove --recover from the command line", "node", c.cfg.NodeID, "cluster_id", c.ClusterID(),
			"recovered_from", last.From, "recovered_at_ms", last.AtMS)
		return false, nil
	}
	if alive := c.probeMembers(others); len(alive) > 0 {
		return false, fmt.Errorf("%w: --recover on node %s: %s answer as members of cluster %s, so the cluster is not lost "+
			"(recovering would hand their worker IDs to new nodes while they still issue): start this node without --recover "+
			"to rejoin them, or stop them for good first", ErrRefused, c.cfg.NodeID, strings.Join(alive, ", "), c.ClusterID())
	}
	return true, nil
}

// otherMembers are the other nodes this node knows of, by Raft address:
// the members of its state machine and the servers of the latest Raft
// configuration in its log or snapshot (a join this node logged but did
// not see committed).
func (c *Cluster) otherMembers(logs raft.LogStore, snaps raft.SnapshotStore) map[string]string {
	others := map[string]string{}
	for _, m := range c.fsm.memberList() {
		if m.NodeID != c.cfg.NodeID && m.RaftAddr != "" {
			others[m.NodeID] = m.RaftAddr
		}
	}
	var servers []raft.Server
	first, _ := logs.FirstIndex()
	last, _ := logs.LastIndex()
	found := false
	for i := last; i >= first && i > 0 && !found; i-- {
		var l raft.Log
		if logs.GetLog(i, &l) == nil && l.Type == raft.LogConfiguration {
			servers, found = raft.DecodeConfiguration(l.Data).Servers, true
		}
	}
	if list, err := snaps.List(); !found && err == nil && len(list) > 0 {
		servers = list[0].Configuration.Servers
	}
	for _, s := range servers {
		if string(s.ID) != c.cfg.NodeID {
			others[string(s.ID)] = string(s.Address)
		}
	}
	return others
}

// probeMembers asks each of others who it is (an authenticated
// node-to-node identify) and returns those that answer as members of this
// node's cluster, or that answer and cannot be told apart (they refuse this
// node's secret, in a request or in the Raft port's handshake).
func (c *Cluster) probeMembers(others map[string]string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), max(4*c.timing.Election, 3*time.Second))
	defer cancel()
	var mu sync.Mutex
	var alive []string
	var wg sync.WaitGroup
	for node, addr := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.call(ctx, addr, &request{Op: opIdentify})
			var re *remoteError
			var why string
			switch {
			case err == nil && resp.Identity != nil && resp.Identity.Cluster == c.ClusterID():
				why = fmt.Sprintf("node %s at %s", resp.Identity.Node, addr)
			case errors.As(err, &re), errors.Is(err, ErrAuth):
				why = fmt.Sprintf("node %s at %s (it answers but refused this node: %v)", node, addr, err)
			case err == nil:
				c.log.Warn("--recover: a lost member's Raft address answers for another cluster", "node", node, "addr", addr,
					"answered_node", identityNode(resp), "answered_cluster", identityCluster(resp))
				return
			default:
				c.log.Info("--recover: a member does not answer", "node", node, "addr", addr, "err", err)
				return
			}
			mu.Lock()
			alive = append(alive, why)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Strings(alive)
	return alive
}

func identityNode(r *response) string {
	if r == nil || r.Identity == nil {
		return ""
	}
	return r.Identity.Node
}

func identityCluster(r *response) string {
	if r == nil || r.Identity == nil {
		return ""
	}
	return r.Identity.Cluster
}

// recoverAlone commits, as the only voter, that the other members are gone,
// and records the recovery in the store.
func (c *Cluster) recoverAlone(from string) error {
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
	id, now := c.ClusterID(), c.nowMS()
	if _, err := c.apply(newEntry(entryRecover).string(c.cfg.NodeID).varint(now).varint(skip).
		varint(10 * c.cfg.WorkerLease.Milliseconds()).string(id)); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if err := c.cfg.Store.SetRecoverySync(persist.Recovery{From: from, To: id, AtMS: now}); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	c.log.Warn("recovered the cluster alone, under a new cluster ID: the other members are forgotten, every tag skipped ahead", "cluster_id", id,
		"previous_cluster_id", from, "skip_values", skip, "skip_lease_ms", 10*c.cfg.WorkerLease.Milliseconds())
	return nil
}
