package cluster

// Allocation of tag values and its group commit, and reading a tag's high-water.

import (
	"context"
	"errors"
	"time"

	"idserver/engine"
)

// allocReq is one caller's allocation waiting for a batch: the leader's
// group commit, or a follower's next request to the leader (forward.go).
type allocReq struct {
	ctx   context.Context
	items []allocItem
	done  chan allocDone
}

type allocDone struct {
	results []allocResult
	err     error
}

// queue puts items on q for its batch loop and waits for their results,
// until ctx ends: the allocation may then still commit (a gap, never a
// repeat).
func (c *Cluster) queue(ctx context.Context, q chan *allocReq, items []allocItem) ([]allocResult, error) {
	req := &allocReq{ctx: ctx, items: items, done: make(chan allocDone, 1)}
	select {
	case q <- req:
	case <-ctx.Done():
		return nil, noLeader(ErrNotApplied, "%v", ctx.Err())
	case <-c.stop:
		return nil, noLeader(ErrLeaderUnknown, "node %s is closing", c.cfg.NodeID)
	}
	select {
	case d := <-req.done:
		return d.results, d.err
	case <-ctx.Done():
		return nil, noLeader(ErrNotApplied, "%v", ctx.Err())
	}
}

// answerEach gives each request of batch its own results, in order, or err.
func answerEach(batch []*allocReq, results []allocResult, err error) {
	for _, r := range batch {
		if err != nil {
			r.done <- allocDone{err: err}
			continue
		}
		r.done <- allocDone{results: results[:len(r.items)]}
		results = results[len(r.items):]
	}
}

// Allocate reserves n contiguous values of tag, cluster-wide. On the leader
// it joins the next group commit; elsewhere it is sent to the leader. When
// the leader it asked no longer leads (a handoff, an election), it asks
// again once, if another leader is elected within two election timeouts:
// a retry of an allocation that did commit leaves a gap, never a repeat.
func (c *Cluster) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	_, before := c.raft.LeaderWithID()
	first, last, err := c.allocate(ctx, tag, n)
	if errors.Is(err, ErrNoLeader) && c.nextLeader(ctx, before, 2*c.timing.Election) {
		first, last, err = c.allocate(ctx, tag, n)
	}
	return first, last, err
}

func (c *Cluster) allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	results, err := c.allocateItems(ctx, []allocItem{{Tag: tag, N: n, Node: c.cfg.NodeID, Boot: c.boot}})
	if err != nil {
		return 0, 0, err
	}
	return results[0].First, results[0].Last, results[0].Err
}

// AllocateEach reserves n[i] contiguous values of each of tags[i], all in
// one group commit on the leader (one request to it from elsewhere), each
// with its own outcome. It asks again once, as Allocate does, when the
// leader it asked no longer leads.
func (c *Cluster) AllocateEach(ctx context.Context, tags []string, n []int64) []engine.Allocation {
	items := make([]allocItem, len(tags))
	for i, tag := range tags {
		items[i] = allocItem{Tag: tag, N: n[i], Node: c.cfg.NodeID, Boot: c.boot}
	}
	_, before := c.raft.LeaderWithID()
	results, err := c.allocateItems(ctx, items)
	if errors.Is(err, ErrNoLeader) && c.nextLeader(ctx, before, 2*c.timing.Election) {
		results, err = c.allocateItems(ctx, items)
	}
	out := make([]engine.Allocation, len(tags))
	for i := range out {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i] = engine.Allocation{First: results[i].First, Last: results[i].Last, Err: results[i].Err}
	}
	return out
}

// allocateItems allocates items in one group commit: here on the leader,
// or in one request to it (with those forwarded meanwhile: forward.go).
// It has one result per item, or an error.
func (c *Cluster) allocateItems(ctx context.Context, items []allocItem) ([]allocResult, error) {
	var results []allocResult
	if c.IsLeader() {
		var err error
		if results, err = c.allocLocal(ctx, items); err != nil {
			return nil, err
		}
	} else {
		var err error
		if results, err = c.forwardAlloc(ctx, items); err != nil {
			return nil, err
		}
	}
	if len(results) != len(items) {
		return nil, noLeader(ErrNotApplied, "allocation lost its answer")
	}
	return results, nil
}

// allocLocal queues items for the group commit on this node, the leader,
// once no SET is checking their tags (or after a heartbeat's wait: the
// hold is for progress, not safety, and must not stall a tag for as long
// as a SET waits on a member that does not answer).
func (c *Cluster) allocLocal(ctx context.Context, items []allocItem) ([]allocResult, error) {
	for _, it := range items {
		c.waitHold(ctx, it.Tag, c.timing.Heartbeat)
	}
	return c.queue(ctx, c.allocs, items)
}

// runGroupCommit drains waiting allocations into one log entry at a time
// (uhaha's runWriteApplier), gathered as gather says.
func (c *Cluster) runGroupCommit() {
	defer c.stopped.Done()
	g := newGather(c.allocs, c.stop)
	for {
		batch, items := g.next()
		if batch == nil {
			return
		}
		all := make([]allocItem, 0, items)
		for _, r := range batch {
			all = append(all, r.items...)
		}
		start := time.Now()
		resp, err := c.apply(c.allocEntry(all))
		g.handled(len(batch), time.Since(start))
		results, _ := resp.([]allocResult)
		if err == nil && len(results) != items {
			err = noLeader(ErrNotApplied, "allocation lost its answer")
		}
		answerEach(batch, results, err)
	}
}

// Get is a tag's high-water as this node's state machine has it, which on
// a follower may lag the leader by a few entries. EXISTS and DBSIZE use it.
func (c *Cluster) Get(tag string) (int64, bool) { return c.fsm.tag(tag) }

// High is a tag's cluster-wide allocation high-water, at least every value
// any node handed out before the call: read on the leader once it has
// confirmed it still leads (readIndex). With no leader to ask, or one that
// cannot confirm it leads, it is ErrNoLeader: a lagging local copy, or a
// deposed leader's, could be below a value already handed out.
func (c *Cluster) High(ctx context.Context, tag string) (int64, bool, error) {
	if c.IsLeader() {
		if err := c.readIndex(ctx); err != nil {
			return 0, false, err
		}
		v, ok := c.fsm.tag(tag)
		return v, ok, nil
	}
	resp, err := c.toLeader(ctx, &request{Op: opHigh, Tag: tag})
	if err != nil {
		return 0, false, err
	}
	return resp.Value, resp.Found, nil
}

// Size is the number of tags.
func (c *Cluster) Size() int { return c.fsm.size() }
