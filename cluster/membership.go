package cluster

// Membership: joins (checked before anything changes), admission, promotion
// of non-voters, FORGET, and what a node knows of the configuration.

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"
)

// Join checks a node and makes it a member: a voter with a worker ID and a
// lease, or, for a member that restarted, records its new addresses. The
// check runs before anything changes: the node must answer on raftAddr as
// node, with no other cluster's state, this cluster's layout, and a data
// directory that is not empty if node is already a member. A refused join
// leaves the cluster exactly as it was. It runs on the leader; elsewhere it
// is sent there.
// It returns the member's worker ID, the ID time its generator must start
// above (a reused worker's previous lease end) and its lease end.
func (c *Cluster) Join(ctx context.Context, node, raftAddr, respAddr string) (worker, startAboveMS, leaseEndMS int64, err error) {
	var jr JoinResult
	if c.IsLeader() {
		jr, err = c.join(ctx, node, raftAddr, respAddr)
	} else {
		var resp *response
		resp, err = c.toLeader(ctx, &request{Op: opJoin, Node: node, RaftAddr: raftAddr, RESPAddr: respAddr})
		switch {
		case err != nil:
		case resp.Join == nil:
			err = fmt.Errorf("%w: the leader's answer to a join has no result", ErrNoLeader)
		default:
			jr = *resp.Join
		}
	}
	return jr.Worker, jr.StartAboveMS, jr.LeaseEndMS, err
}

func (c *Cluster) join(ctx context.Context, node, raftAddr, respAddr string) (JoinResult, error) {
	refuse := func(format string, args ...any) (JoinResult, error) {
		err := fmt.Errorf("%w: join of node %q: %s; nothing changed", ErrRefused, node, fmt.Sprintf(format, args...))
		c.log.Warn("join refused", "err", err)
		return JoinResult{}, err
	}
	var id Identity
	if node == c.cfg.NodeID {
		var err error
		if id, err = c.identity(); err != nil {
			return JoinResult{}, err
		}
	} else {
		resp, err := c.call(ctx, raftAddr, &request{Op: opIdentify})
		if err != nil {
			return refuse("no idserver answers on its Raft address %s (%v)", raftAddr, err)
		}
		id = *resp.Identity
	}
	ours := c.ClusterID()
	m, member := c.fsm.member(node)
	switch {
	case id.Node != node:
		return refuse("the node at %s is %q", raftAddr, id.Node)
	case id.Cluster != "" && id.Cluster != ours:
		return refuse("its data directory holds cluster %s (its own one-node cluster, or another cluster), this is cluster %s: "+
			"start it with an empty --dir to join this cluster", id.Cluster, ours)
	case id.Layout != c.cfg.Layout.String():
		return refuse("its ID layout [%s] differs from this cluster's [%s]: start it with this cluster's layout flags and an empty --dir",
			id.Layout, c.cfg.Layout.String())
	case member && !id.HasWorker:
		return refuse("it is still a member (worker ID %d) but its data directory is empty (a replaced disk?), "+
			"and what it issued is lost with it: CLUSTER FORGET %s first, or start it with a new --node-id", m.Worker, node)
	case !member && id.HasWorker:
		return refuse("its data directory holds a worker ID, but it is not a member (it was forgotten): " +
			"start it with an empty --dir to join again")
	case id.RESPAddr != "" && id.RESPAddr != respAddr:
		return refuse("the node at %s says its RESP address is %s, not %s", raftAddr, id.RESPAddr, respAddr)
	case !member && c.fsm.freeWorker() < 0:
		return refuse("no free worker ID: all %d are held; CLUSTER FORGET a node that is gone", c.cfg.Layout.MaxWorker()+1)
	}
	if member && m.RaftAddr != raftAddr && node != c.cfg.NodeID {
		// A move is a restart on a new address, unless the old address
		// still answers as the node: then two processes share one identity
		// (a copied data directory), and one of them must go.
		octx, cancel := context.WithTimeout(ctx, c.timing.Election*2)
		old, err := c.call(octx, m.RaftAddr, &request{Op: opIdentify})
		cancel()
		if err == nil && old.Identity != nil && old.Identity.Node == node {
			return refuse("node %s still answers at its Raft address %s; a second process with its identity at %s "+
				"(a copied data directory?) must be stopped, and started on an empty --dir to join", node, m.RaftAddr, raftAddr)
		}
	}
	if member {
		// A member that restarted, perhaps on new addresses. One that is
		// a non-voter (it joined but was not promoted: killed while it
		// caught up, or the leader changed), or out of the configuration
		// and back on a new address, is promoted once caught up.
		switch suffrage := c.suffrageOf(node); {
		case node != c.cfg.NodeID && (suffrage == "nonvoter" || suffrage == "staging" || suffrage == "none" && m.RaftAddr != raftAddr):
			if err := c.raft.AddNonvoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, c.timing.Apply).Error(); err != nil {
				return JoinResult{}, fmt.Errorf("%w: add non-voter: %v", ErrNoLeader, err)
			}
			go c.promoteWhenCaughtUp(node, raftAddr, c.raft.LastIndex())
		case m.RaftAddr != raftAddr:
			if err := c.raft.AddVoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, c.timing.Apply).Error(); err != nil {
				return JoinResult{}, fmt.Errorf("%w: add voter: %v", ErrNoLeader, err)
			}
		}
		if m.RaftAddr != raftAddr || m.RESPAddr != respAddr {
			resp, err := c.apply(newEntry(entryAddrs).string(node).string(raftAddr).string(respAddr))
			if err != nil {
				return JoinResult{}, err
			}
			if e, ok := resp.(error); ok {
				return JoinResult{}, e
			}
		}
		return JoinResult{Worker: m.Worker, LeaseEndMS: c.fsm.lease(node)}, nil
	}
	if node != c.cfg.NodeID {
		if _, err := c.call(ctx, raftAddr, &request{Op: opAdmit}); err != nil {
			return refuse("it did not accept this cluster (%v)", err)
		}
		// A non-voter first: while it catches up, and if it dies before it
		// has, it counts towards no majority, so a joiner killed mid-join
		// cannot take the quorum away (a voter that never answers would).
		if err := c.raft.AddNonvoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, c.timing.Apply).Error(); err != nil {
			return JoinResult{}, fmt.Errorf("%w: add non-voter: %v", ErrNoLeader, err)
		}
	}
	resp, index, err := c.applyIndex(newEntry(entryJoin).string(node).string(raftAddr).string(respAddr).
		varint(c.nowMS()).varint(c.cfg.WorkerLease.Milliseconds()))
	if err != nil {
		return JoinResult{}, err
	}
	jr, err := applyAnswer[joinResult](resp, "join")
	if err != nil {
		return JoinResult{}, err
	}
	if jr.Err != nil {
		if node != c.cfg.NodeID {
			// Leave the configuration as it was: no stray server.
			c.raft.RemoveServer(raft.ServerID(node), 0, c.timing.Apply)
		}
		return JoinResult{}, jr.Err
	}
	if node != c.cfg.NodeID {
		// The join answers now, as fast as it did when the joiner was
		// added as a voter at once: a joiner whose answer is late retries
		// (its read times out after 3 s), and is refused as a member with
		// an empty directory.
		go c.promoteWhenCaughtUp(node, raftAddr, index)
	}
	c.log.Info("member joined", "node", node, "worker", jr.Worker, "raft", raftAddr, "resp", respAddr,
		"start_above_ms", jr.StartAboveMS, "lease_end_ms", jr.LeaseEndMS)
	return JoinResult{Worker: jr.Worker, StartAboveMS: jr.StartAboveMS, LeaseEndMS: jr.LeaseEndMS}, nil
}

// suffrage is this node's standing in its latest Raft configuration.
func (c *Cluster) suffrage() string { return c.suffrageOf(c.cfg.NodeID) }

// suffrageOf is node's standing in the latest Raft configuration this node
// knows: voter, nonvoter, staging, or none.
func (c *Cluster) suffrageOf(node string) string {
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return "none"
	}
	for _, s := range cf.Configuration().Servers {
		if s.ID == raft.ServerID(node) {
			return strings.ToLower(s.Suffrage.String())
		}
	}
	return "none"
}

// promoteWhenCaughtUp promotes a member that joined as a non-voter once
// it has applied index, waiting up to a node-to-node call's budget; after
// that the leader's promoteCaughtUp keeps trying. Until then the node shows
// raft_suffrage:nonvoter in CLUSTER INFO.
func (c *Cluster) promoteWhenCaughtUp(node, raftAddr string, index uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.Call)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := c.promote(ctx, node, raftAddr, index); err != nil {
		c.log.Warn("member not promoted yet: it stays a non-voter until it has caught up", "node", node, "err", err)
	}
}

// promote makes node, a non-voter, a voter once it has applied index (it
// caught up with the log that made it a member), waiting for that as long
// as ctx allows, so that it counts towards a majority only when it can
// take part in one.
func (c *Cluster) promote(ctx context.Context, node, raftAddr string, index uint64) error {
	_, err := c.call(ctx, raftAddr, &request{Op: opApplied, Index: index})
	if err != nil {
		return fmt.Errorf("%w: node %s has not caught up to index %d yet: %v", ErrNoLeader, node, index, err)
	}
	if err := c.raft.AddVoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, c.timing.Apply).Error(); err != nil {
		return fmt.Errorf("%w: add voter: %v", ErrNoLeader, err)
	}
	c.log.Info("member promoted to voter", "node", node, "index", index)
	return nil
}

// promoteCaughtUp promotes the non-voting members that have caught up: a
// joiner whose promotion failed (it was slow, or the leader changed) is not
// left out of the majority for good.
func (c *Cluster) promoteCaughtUp() {
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			continue
		}
		if _, member := c.fsm.member(string(s.ID)); !member {
			continue // a joiner not yet a member, or a stray: its join or FORGET decides
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.timing.Election)
		if err := c.promote(ctx, string(s.ID), string(s.Address), c.raft.LastIndex()); err != nil {
			c.log.Debug("non-voting member not promoted yet", "node", s.ID, "err", err)
		}
		cancel()
	}
}

// identity is what this node says of itself to a node checking a join.
func (c *Cluster) identity() (Identity, error) {
	_, _, has, err := c.cfg.Store.Worker()
	return Identity{Node: c.cfg.NodeID, Cluster: c.ClusterID(), Layout: c.cfg.Layout.String(), HasWorker: has,
		RESPAddr: c.cfg.RESPAddr}, err
}

// admit makes this node, which belongs to no cluster yet, a node of
// cluster id: it stores the identity and from then on takes Raft streams
// of that cluster.
func (c *Cluster) admit(id string) error {
	switch ours := c.ClusterID(); {
	case id == "":
		return fmt.Errorf("%w: admission without a cluster identity", ErrRefused)
	case ours == id:
		return nil
	case ours != "":
		return fmt.Errorf("%w: node %s belongs to cluster %s, not %s", ErrRefused, c.cfg.NodeID, ours, id)
	case !c.cfg.Join:
		return fmt.Errorf("%w: node %s was not started to join a cluster", ErrRefused, c.cfg.NodeID)
	}
	if err := c.cfg.Store.SetClusterIDSync(id); err != nil {
		return err
	}
	c.cluster.Store(&id)
	c.log.Info("admitted to the cluster", "cluster_id", id)
	return nil
}

// Forget removes node for good: out of the Raft configuration, its worker
// ID free for a new node above the end of its last lease, which it can no
// longer extend. Safe while the node still runs: it stops issuing IDs when
// its lease ends.
func (c *Cluster) Forget(ctx context.Context, node string) error {
	if node == c.cfg.NodeID {
		return fmt.Errorf("%w: a node cannot forget itself", ErrRefused)
	}
	if !c.IsLeader() {
		_, err := c.toLeader(ctx, &request{Op: opForget, Node: node})
		return err
	}
	return c.forget(node)
}

func (c *Cluster) forget(node string) error {
	if node == c.cfg.NodeID {
		// Another member asks the leader to forget the leader: hand the
		// leadership over first, then the retry reaches the new leader.
		if err := c.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("%w: node %s leads and could not hand over leadership to be forgotten: %v", ErrNoLeader, node, err)
		}
		return fmt.Errorf("%w: node %s led; leadership moved to another member: retry the FORGET", ErrNoLeader, node)
	}
	_, member := c.fsm.member(node)
	voter := false
	if cf := c.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			voter = voter || s.ID == raft.ServerID(node)
		}
	}
	if !member && !voter {
		return fmt.Errorf("%w: unknown node %q", ErrNotMember, node)
	}
	m, _ := c.fsm.member(node)
	if err := c.raft.RemoveServer(raft.ServerID(node), 0, c.timing.Apply).Error(); err != nil {
		return fmt.Errorf("%w: remove server: %v", ErrNoLeader, err)
	}
	if !member {
		c.log.Info("stray voter removed", "node", node)
		return nil
	}
	resp, err := c.apply(newEntry(entryForget).string(node))
	if err != nil {
		return err
	}
	if e, ok := resp.(error); ok {
		return e
	}
	// Tell the node, if it still runs, best effort and only now that it is
	// forgotten for good, to drop its buffered values: a SET after the
	// FORGET does not reach it. One cut off keeps them (README, Not there yet).
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.timing.Election)
	c.call(ctx, m.RaftAddr, &request{Op: opForgotten, Node: node})
	cancel()
	c.log.Info("member forgotten", "node", node)
	return nil
}

// Alone reports whether this node's Raft configuration holds this node
// and nobody else: a one-node cluster (its own, or one it was left alone in).
func (c *Cluster) Alone() bool {
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return false
	}
	servers := cf.Configuration().Servers
	return len(servers) == 1 && servers[0].ID == raft.ServerID(c.cfg.NodeID)
}

// PeerAddrs lists the RESP addresses of the other members, as this node's
// state machine has them.
func (c *Cluster) PeerAddrs() []string {
	var out []string
	for _, m := range c.fsm.memberList() {
		if m.NodeID != c.cfg.NodeID && m.RESPAddr != "" {
			out = append(out, m.RESPAddr)
		}
	}
	return out
}
