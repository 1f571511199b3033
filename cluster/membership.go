package cluster

// Membership: joins (checked before anything changes), admission, a
// replacement at a dead member's address, FORGET (by the operator or by
// autopilot, autopilot.go), and what a node knows of the configuration.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"idserver/engine"
)

// Join checks a node and makes it a member: a non-voter with a worker ID
// and a lease (autopilot makes it a voter if the cluster wants one more),
// or, for a member that restarted, records its new addresses. A member
// that held its address and is not there any more is removed first. The
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
			err = noLeader(ErrNotApplied, "the leader's answer to a join has no result")
		default:
			jr = *resp.Join
		}
	}
	return jr.Worker, jr.StartAboveMS, jr.LeaseEndMS, err
}

// JoinThrough asks the member whose Raft address is member to make node a
// member, as Join does, on the Raft port's channel: the connection proves
// the cluster secret first (a wrong one is ErrAuth, and nothing is sent),
// and a member that does not lead sends the join on to the leader. It is
// for a node that belongs to no cluster yet, or cannot reach the leader
// through its own Raft view. A refusal is ErrRefused, ErrRemoved too for a
// node the cluster removed.
func (c *Cluster) JoinThrough(ctx context.Context, member, node, raftAddr, respAddr string) (worker, startAboveMS, leaseEndMS int64, err error) {
	resp, err := c.call(ctx, member, &request{Op: opJoinVia, Node: node, RaftAddr: raftAddr, RESPAddr: respAddr})
	switch {
	case err != nil:
		return 0, 0, 0, err
	case resp.Join == nil:
		return 0, 0, 0, noLeader(ErrNotApplied, "the answer of %s to a join has no result", member)
	}
	return resp.Join.Worker, resp.Join.StartAboveMS, resp.Join.LeaseEndMS, nil
}

// removedRefusal is the text of a join's refusal for ErrRemoved; older
// builds recognise a refusal as ErrRemoved by it.
const removedRefusal = "its data directory holds a worker ID, but it is not a member (it was removed)"

// removedJoin is a join's refusal for ErrRemoved: ErrRefused and ErrRemoved.
type removedJoin struct{ refusal error }

func (e *removedJoin) Error() string   { return e.refusal.Error() }
func (e *removedJoin) Unwrap() []error { return []error{e.refusal, ErrRemoved} }

func (c *Cluster) join(ctx context.Context, node, raftAddr, respAddr string) (JoinResult, error) {
	refuse := func(format string, args ...any) (JoinResult, error) {
		err := fmt.Errorf("%w: join of node %q: %s; nothing changed", ErrRefused, node, fmt.Sprintf(format, args...))
		c.log.Warn("join refused", "err", err)
		return JoinResult{}, err
	}
	// Every check below reads the state machine, which after an election
	// (a power cut of every node, say) may be behind the log: its member
	// table without the joins it has not applied yet, and a member that
	// restarts refused as forgotten.
	if err := c.caughtUp(); err != nil {
		return JoinResult{}, err
	}
	var id Identity
	if node == c.cfg.NodeID {
		// This node answers for itself without dialing raftAddr, so the
		// address must be its own: a client's CLUSTER JOIN must not move it.
		if raftAddr != c.RaftAddr() {
			return refuse("this node is %s and its Raft address is %s, not %s", node, c.RaftAddr(), raftAddr)
		}
		var err error
		if id, err = c.identity(); err != nil {
			return JoinResult{}, err
		}
	} else {
		resp, err := c.call(ctx, raftAddr, &request{Op: opIdentify})
		switch {
		case errors.Is(err, ErrAuth):
			return refuse("the node at its Raft address %s does not prove this cluster's secret: start it with this cluster's --cluster-secret (%v)", raftAddr, err)
		case err != nil:
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
	case member && !id.HasWorker && id.Boot != 0 && m.JoinBoot == id.Boot:
		// The process this join admitted asks again: its first answer was
		// lost (a late read, a leadership change as the entry committed).
		c.log.Info("join answered again: the same process asked twice", "node", node, "worker", m.Worker)
		return JoinResult{Worker: m.Worker, StartAboveMS: m.StartAboveMS, LeaseEndMS: c.fsm.lease(node)}, nil
	case member && !id.HasWorker:
		return refuse("it is still a member (worker ID %d) but its data directory is empty (a replaced disk?), "+
			"and what it issued is lost with it: CLUSTER FORGET %s first, or start it with a new --node-id", m.Worker, node)
	case !member && id.HasWorker:
		_, err := refuse("%s: its node, restarted, joins again as a new member", removedRefusal)
		return JoinResult{}, &removedJoin{err}
	case !member && id.Reads < c.fsm.shapesNeeded():
		return refuse("its idserver build is older than this cluster's log: the cluster was created by a newer build " +
			"(compact tag records), or its log has held an MSET or a --max-tags bound, which that build cannot read; " +
			"start it with the build the members run (INFO server's idserver_version) or a newer one")
	case id.PublicKey != "" && c.fsm.publicKey() != nil && id.PublicKey != engine.PublicKeyFingerprint(c.fsm.publicKey()):
		return refuse("its --public-key (fingerprint %s) differs from this cluster's public-ID key (fingerprint %s): "+
			"start it with this cluster's key, or without --public-key", id.PublicKey, engine.PublicKeyFingerprint(c.fsm.publicKey()))
	case id.RESPAddr != "" && id.RESPAddr != respAddr:
		return refuse("the node at %s says its RESP address is %s, not %s", raftAddr, id.RESPAddr, respAddr)
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
	if node != c.cfg.NodeID {
		switch err := c.replaceAt(ctx, node, raftAddr, respAddr); {
		case errors.Is(err, ErrNoLeader):
			// The removal did not commit (the leadership was lost, say):
			// the joiner asks again, as it does while there is no leader.
			return JoinResult{}, err
		case err != nil:
			return refuse("%v", err)
		}
	}
	if !member && c.fsm.freeWorker() < 0 {
		return refuse("no free worker ID: all %d are held by members%s; a member not heard from for --dead-member-after (%v) is removed "+
			"and frees its ID, or CLUSTER FORGET a node that is gone", c.fsm.assignable(), c.fsm.reservedNote(), c.cfg.DeadMemberAfter)
	}
	if member {
		// A member that restarted, perhaps on new addresses. One out of
		// the Raft configuration (a FORGET half done, or autopilot took it
		// for a stray) enters again as a non-voter; autopilot decides
		// whether it votes.
		switch suffrage := c.suffrageOf(node); {
		case node == c.cfg.NodeID:
		case suffrage == "none" || suffrage != "voter" && m.RaftAddr != raftAddr:
			if err := c.await(c.raft.AddNonvoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, c.timing.Apply)); err != nil {
				return JoinResult{}, noLeader(ErrNotApplied, "add non-voter: %v", err)
			}
		case m.RaftAddr != raftAddr:
			if err := c.await(c.raft.AddVoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, c.timing.Apply)); err != nil {
				return JoinResult{}, noLeader(ErrNotApplied, "add voter: %v", err)
			}
		}
		if m.RaftAddr != raftAddr || m.RESPAddr != respAddr || m.Zone != id.Zone {
			resp, err := c.apply(newEntry(entryAddrs).string(node).string(raftAddr).string(respAddr).string(id.Zone))
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
		// Autopilot promotes it once it is healthy and stable, if the
		// cluster has fewer voters than it wants.
		c.pilot.join(node, raftAddr)
		defer c.pilot.joined(node)
		if err := c.await(c.raft.AddNonvoter(raft.ServerID(node), raft.ServerAddress(raftAddr), 0, c.timing.Apply)); err != nil {
			return JoinResult{}, noLeader(ErrNotApplied, "add non-voter: %v", err)
		}
	}
	resp, err := c.apply(newEntry(entryJoin).string(node).string(raftAddr).string(respAddr).
		varint(c.nowMS()).varint(c.cfg.WorkerLease.Milliseconds()).string(id.Zone).uvarint(id.Boot))
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
	c.log.Info("member joined", "node", node, "worker", jr.Worker, "raft", raftAddr, "resp", respAddr, "zone", id.Zone,
		"start_above_ms", jr.StartAboveMS, "lease_end_ms", jr.LeaseEndMS)
	return JoinResult{Worker: jr.Worker, StartAboveMS: jr.StartAboveMS, LeaseEndMS: jr.LeaseEndMS}, nil
}

// replaceAt makes room for node at raftAddr and respAddr: a member that
// had either address and is not there any more (the Raft address answered
// as node; a member that only shared the RESP address is asked at its own
// Raft address) is removed as FORGET removes it, and so is a server of the
// Raft configuration at raftAddr that is no member. This is a pod
// rescheduled with an empty volume under the same name: without it the
// dead member would hold the address until someone forgot it. A member
// that still answers as itself is an error: two processes claim one
// address.
func (c *Cluster) replaceAt(ctx context.Context, node, raftAddr, respAddr string) error {
	for _, other := range c.fsm.memberList() {
		if other.NodeID == node || other.NodeID == c.cfg.NodeID || other.RaftAddr != raftAddr && other.RESPAddr != respAddr {
			continue
		}
		if other.RaftAddr != raftAddr {
			octx, cancel := context.WithTimeout(ctx, c.timing.Election*2)
			resp, err := c.call(octx, other.RaftAddr, &request{Op: opIdentify})
			cancel()
			if err == nil && resp.Identity != nil && resp.Identity.Node == other.NodeID {
				return fmt.Errorf("member %s still answers at %s and advertises the same RESP address %s: give each node its own --advertise",
					other.NodeID, other.RaftAddr, respAddr)
			}
		}
		c.log.Warn("replacing a member that is no longer at its address", "member", other.NodeID, "raft", other.RaftAddr,
			"resp", other.RESPAddr, "by", node)
		if err := c.forget(other.NodeID); err != nil {
			return fmt.Errorf("member %s held its address and could not be removed yet (%w); the join may be retried", other.NodeID, err)
		}
	}
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.Address) != raftAddr || string(s.ID) == node {
			continue
		}
		if _, member := c.fsm.member(string(s.ID)); member {
			continue // a member's; handled above (or its join is in flight)
		}
		if err := c.await(c.raft.RemoveServer(s.ID, 0, c.timing.Apply)); err != nil {
			return noLeader(ErrNotApplied, "a stray server %s holds the address %s and could not be removed yet (%v)", s.ID, raftAddr, err)
		}
		c.log.Info("stray server removed from the configuration", "node", s.ID, "raft", raftAddr)
	}
	return nil
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

// identity is what this node says of itself to a node checking a join.
func (c *Cluster) identity() (Identity, error) {
	_, _, has, err := c.cfg.Store.Worker()
	id := Identity{Node: c.cfg.NodeID, Cluster: c.ClusterID(), Layout: c.cfg.Layout.String(), HasWorker: has,
		RESPAddr: c.cfg.RESPAddr, Zone: c.cfg.Zone, Boot: c.boot, Reads: logShapes}
	if c.cfg.PublicKey != nil {
		id.PublicKey = engine.PublicKeyFingerprint(c.cfg.PublicKey)
	}
	return id, err
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
			return noLeader(ErrNotLeader, "node %s leads and could not hand over leadership to be forgotten: %v", node, err)
		}
		return noLeader(ErrNotLeader, "node %s led; leadership moved to another member: retry the FORGET", node)
	}
	if err := c.caughtUp(); err != nil { // the member table, as in join
		return err
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
	if err := c.await(c.raft.RemoveServer(raft.ServerID(node), 0, c.timing.Apply)); err != nil {
		return noLeader(ErrNotApplied, "remove server: %v", err)
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
	// FORGET does not reach it. One cut off stops when its lease ends, and
	// a SET waits for that (waitDeparted) unless the node confirmed here.
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.timing.Election)
	_, err = c.call(ctx, m.RaftAddr, &request{Op: opForgotten, Node: node})
	cancel()
	if err == nil {
		c.departedMu.Lock()
		c.confirmedGone[node] = true
		c.departedMu.Unlock()
	}
	c.log.Info("member forgotten", "node", node, "confirmed_by_it", err == nil)
	return nil
}

// leaseSkew is how far apart the members' wall clocks may be: a removed
// node stops handing out values when its own clock passes its lease end, so
// a SET waits for the leader's clock to pass it by this much more.
const leaseSkew = time.Second

// waitDeparted returns once every member removed while it could still
// hand out values has stopped: it confirmed its removal to this leader, or
// its lease has ended (a removed node that still runs, cut off, stops at
// its lease end: IDs, and buffered segment values too). A SET calls it
// first, before it asks the members what they issued and fences them:
// values the removed node buffered cannot come out after the SET. It waits at most as long as ctx allows; past that it is
// ErrUnconfirmed, naming the node and when its lease ends.
func (c *Cluster) waitDeparted(ctx context.Context) error {
	for node, endMS := range c.fsm.departedLeases() {
		c.departedMu.Lock()
		confirmed := c.confirmedGone[node]
		c.departedMu.Unlock()
		if confirmed {
			continue
		}
		wait := time.Duration(endMS-c.nowMS())*time.Millisecond + leaseSkew
		if wait <= 0 {
			continue
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return fmt.Errorf("%w: node %s was removed from the cluster and may hand out its buffered values until its lease ends in %v; "+
				"retrying then is safe", ErrUnconfirmed, node, wait.Round(time.Millisecond))
		}
		c.log.Info("a SET waits for a removed member's lease to end", "node", node, "wait", wait.Round(time.Millisecond).String())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: waiting for removed node %s's lease to end: %v", ErrUnconfirmed, node, ctx.Err())
		}
	}
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

// memberAt is the member whose Raft address is addr ("" for none: a joiner
// not yet a member), as the Raft configuration in this node's log has it:
// the servers Raft dials. The state machine may lag the log: after every
// node restarts at once with unsynced applies lost (a power cut), it can
// name a replaced member's old ID at its successor's address until a
// leader commits again, so a check against it would turn away every
// stream to a voter and no leader would be elected. The state machine
// answers only before Raft started. It takes no lock.
func (c *Cluster) memberAt(addr string) string {
	if r := c.started.Load(); r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			for _, srv := range f.Configuration().Servers {
				if string(srv.Address) == addr {
					return string(srv.ID)
				}
			}
			return ""
		}
	}
	for id, m := range *c.fsm.members.Load() {
		if m.RaftAddr == addr {
			return id
		}
	}
	return ""
}
