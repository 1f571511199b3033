package cluster

// Leadership: who leads, waiting for a leader, proposing entries, and what a
// leader does in the background (storing the identity, running autopilot).

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"idserver/engine"
)

// IsLeader reports whether this node leads.
func (c *Cluster) IsLeader() bool { return c.raft.State() == raft.Leader }

// Leader returns the leader's RESP address, if there is a leader and it is
// known. It takes no state machine lock.
func (c *Cluster) Leader() (string, bool) {
	_, id := c.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	if id == raft.ServerID(c.cfg.NodeID) {
		return c.cfg.RESPAddr, true
	}
	m, ok := c.fsm.member(string(id))
	if !ok || m.RESPAddr == "" {
		return "", false
	}
	return m.RESPAddr, true
}

// WaitForLeader polls until there is a known leader or ctx ends.
func (c *Cluster) WaitForLeader(ctx context.Context) (string, error) {
	for {
		if addr, ok := c.Leader(); ok {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", &engine.NoLeaderError{Cause: ErrLeaderUnknown}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// watchRole logs role changes, runs autopilot while this node leads, and as
// the leader of a cluster whose identity is not yet in the state machine,
// commits it.
func (c *Cluster) watchRole() {
	defer c.stopped.Done()
	obs := make(chan raft.Observation, 16)
	o := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	c.raft.RegisterObserver(o)
	defer c.raft.DeregisterObserver(o)
	tick := time.NewTicker(c.timing.Election)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case ob := <-obs:
			c.log.Info("raft role", "role", ob.Data.(raft.RaftState).String(), "term", c.raft.Stats()["term"])
		case <-tick.C:
		}
		if id, _ := c.fsm.identity(); id == "" && c.IsLeader() && c.ClusterID() != "" {
			if _, err := c.apply(newEntry(entryInit).string(c.ClusterID()).string(c.cfg.Layout.String()).uvarint(tagFormatCompact)); err != nil {
				c.log.Warn("cannot store the cluster identity yet", "err", err)
			}
		}
		if c.fsm.publicKey() == nil && c.IsLeader() && c.ClusterID() != "" {
			c.proposePublicKey()
		}
		if c.IsLeader() && c.ClusterID() != "" && c.fsm.maxTags() != c.cfg.MaxTags && c.proposingMaxTags.CompareAndSwap(false, true) {
			c.stopped.Add(1)
			go func() { // it may wait on a member that is down: not here
				defer c.stopped.Done()
				defer c.proposingMaxTags.Store(false)
				c.proposeMaxTags()
			}()
		}
		// Autopilot acts on the state machine's member table (KnownServers):
		// a new leader's may be behind its log (after a power cut of every
		// node), without the members that joined lately, which autopilot
		// would then take for strays and remove. It starts once caught up.
		c.pilot.steer(c.IsLeader() && c.caughtUp() == nil)
	}
}

// proposePublicKey commits the cluster's public-ID key: this node's
// --public-key, or a new random one. It runs once per cluster (at
// bootstrap, or on the first leader of this version in an older cluster).
func (c *Cluster) proposePublicKey() {
	key := c.cfg.PublicKey
	if key == nil {
		key = make([]byte, engine.PublicKeyLen)
		rand.Read(key)
	}
	if _, err := c.apply(newEntry(entryPublicKey).string(string(key))); err != nil {
		c.log.Warn("cannot store the public-ID key yet", "err", err)
	}
}

// PublicKey is the cluster's public-ID key, committed through Raft; nil
// until this node has applied it.
func (c *Cluster) PublicKey() []byte { return c.fsm.publicKey() }

// apply proposes one entry on this node, which must lead.
func (c *Cluster) apply(entry []byte) (any, error) {
	resp, _, err := c.applyIndex(entry)
	return resp, err
}

// applyIndex is apply that also returns the entry's index. Losing or not
// having the leadership is ErrNoLeader.
func (c *Cluster) applyIndex(entry []byte) (any, uint64, error) {
	start := time.Now()
	f := c.raft.Apply(entry, c.timing.Apply)
	err := c.await(f)
	c.disk.committed(time.Since(start))
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return nil, 0, noLeader(ErrNotLeader, "%v", err)
		}
		if errors.Is(err, raft.ErrEnqueueTimeout) || errors.Is(err, raft.ErrRaftShutdown) {
			return nil, 0, noLeader(ErrNotApplied, "%v", err)
		}
		return nil, 0, err
	}
	c.applies.Add(1)
	return f.Response(), f.Index(), nil
}

// nextLeader waits, at most within, for a leader other than the one this
// node knew as before ("" for none), and reports whether one is known.
func (c *Cluster) nextLeader(ctx context.Context, before raft.ServerID, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		if _, id := c.raft.LeaderWithID(); id != "" && id != before {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TransferLeadership hands leadership to another voter.
func (c *Cluster) TransferLeadership() error { return c.raft.LeadershipTransfer().Error() }

// caughtUp returns once this leader's state machine has applied every
// entry committed before its term began. A new leader may still be applying
// what its predecessor committed, and would answer GET below a value
// acknowledged just before the old leader died: a Barrier, once per term,
// waits for that.
func (c *Cluster) caughtUp() error {
	_, err := c.caughtUpTerm()
	return err
}

// caughtUpTerm is caughtUp, also returning the term it holds for.
func (c *Cluster) caughtUpTerm() (uint64, error) {
	term := c.raft.CurrentTerm()
	if c.readyTerm.Load() == term {
		return term, nil
	}
	if err := c.await(c.raft.Barrier(c.timing.Apply)); err != nil {
		return 0, noLeader(ErrLeadershipUnconfirmed, "%v", err)
	}
	c.readyTerm.Store(term)
	return term, nil
}

// readIndex returns once this node's state machine holds every value any
// node handed out before the call, so that a read of it is linearizable;
// ErrNoLeader when this node does not lead, or cannot confirm it does. It
// holds when this node leads in a term whose earlier entries it has
// applied (caughtUpTerm), confirmed by a quorum after the call
// (verifyLeader), the term unchanged meanwhile: a value handed out in an
// earlier term was committed before this one; one handed out in this
// term was allocated by this leader, and applied here before it left. A
// deposed leader that has not noticed yet fails the confirmation, since a
// quorum already follows a later term. When ctx ends first it is
// ErrNoLeader too.
func (c *Cluster) readIndex(ctx context.Context) error {
	term, err := c.caughtUpTerm()
	if err != nil {
		return err
	}
	if err := c.verifyLeader(ctx); err != nil {
		return noLeader(ErrLeadershipUnconfirmed, "node %s cannot confirm it still leads: %v", c.cfg.NodeID, err)
	}
	if now := c.raft.CurrentTerm(); now != term {
		return noLeader(ErrLeadershipUnconfirmed, "the term moved from %d to %d during the read", term, now)
	}
	return nil
}

// verifyRound is one confirmation of the leadership with a quorum
// (raft.VerifyLeader), shared by the calls that joined it before it began.
type verifyRound struct {
	done chan struct{}
	err  error // set before done is closed
}

// leaderChecks batches the confirmations of the leadership reads need
// (verifyLeader); its zero value is ready.
type leaderChecks struct {
	once    sync.Once
	running chan struct{} // holds a token while a round runs
	mu      sync.Mutex
	next    *verifyRound // the round the calls arriving now join; nil: none yet
}

// verifyLeader confirms with a quorum that this node leads, in a round
// that begins after the call, or returns ctx's error when ctx ends first.
// One round runs at a time, in a goroutine of its own that ends within
// the apply budget (await); the calls that arrive meanwhile join the next
// one, which the first of them to find none running starts for all:
// concurrent GETs cost one round trip to the followers, not one each.
func (c *Cluster) verifyLeader(ctx context.Context) error {
	lc := &c.checks
	lc.once.Do(func() { lc.running = make(chan struct{}, 1) })
	lc.mu.Lock()
	r := lc.next
	if r == nil {
		r = &verifyRound{done: make(chan struct{})}
		lc.next = r
	}
	lc.mu.Unlock()
	for {
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		case lc.running <- struct{}{}:
		}
		lc.mu.Lock()
		run := lc.next
		lc.next = nil
		lc.mu.Unlock()
		if run == nil { // r ran, and is done
			<-lc.running
			continue
		}
		go func() {
			run.err = c.await(c.raft.VerifyLeader())
			close(run.done)
			<-lc.running
		}()
	}
}

// await waits for a Raft future, at most the apply budget. Raft answers
// an entry's future (an Apply, a Barrier, a configuration change) only
// once the state machine has applied it, and the state machine waits for
// disk space while the disk is full (fsm.waitRoom), for as long as it
// takes: the caller (a lease renewal, a SET, a join) would wait as long,
// holding whatever it holds. Past the budget it fails with ErrNoLeader,
// naming the full disk when that is why; the entry, if committed, is
// still applied once space is freed (an outcome unknown to the caller, as
// when the leadership is lost after the proposal).
func (c *Cluster) await(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	t := time.NewTimer(c.timing.Apply)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	if full := c.fsm.full.Load(); full != nil {
		return noLeader(ErrNotApplied, "the state machine waits for disk space (%v)", *full)
	}
	return noLeader(ErrNotApplied, "Raft has not applied the entry within %v", c.timing.Apply)
}
