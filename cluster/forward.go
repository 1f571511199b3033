package cluster

import (
	"context"
	"time"
)

// forwardAlloc sends items to the leader in the next batch: one result
// per item, or an error for all of them. It returns when ctx ends, the
// allocation then still on its way (a gap if it commits, never a repeat).
// A follower forwards its allocations in batches, as the leader commits
// them in groups: while a request to the leader is in flight, those that
// come meanwhile wait, and the next request carries all of them (up to
// maxBatchItems), each with its own result. A burst of connections making
// new tags through a follower so costs the leader a few requests on a
// stream already open, not a stream and a handshake each.
func (c *Cluster) forwardAlloc(ctx context.Context, items []allocItem) ([]allocResult, error) {
	return c.queue(ctx, c.forwards, items)
}

// runForwards drains the waiting allocations into one request to the
// leader at a time, gathered as the group commit's entries are (gather).
// A caller gone before its batch leaves has nothing allocated for it.
func (c *Cluster) runForwards() {
	defer c.stopped.Done()
	g := newGather(c.forwards, c.stop)
	for {
		gathered, _ := g.next()
		if gathered == nil {
			return
		}
		var batch []*allocReq
		items := 0
		for _, f := range gathered {
			if f.ctx.Err() == nil {
				batch, items = append(batch, f), items+len(f.items)
			}
		}
		if len(batch) == 0 {
			continue
		}
		start := time.Now()
		results, err := c.sendForwards(batch, items)
		g.handled(len(gathered), time.Since(start))
		answerEach(batch, results, err)
	}
}

// sendForwards sends batch's items to the leader in one request, until
// the last of its callers' deadlines: one result per item, or an error.
func (c *Cluster) sendForwards(batch []*allocReq, items int) ([]allocResult, error) {
	var deadline time.Time
	all := make([]allocItem, 0, items)
	for _, f := range batch {
		d, ok := f.ctx.Deadline()
		if !ok {
			d = time.Now().Add(c.timing.Request)
		}
		if d.After(deadline) {
			deadline = d
		}
		all = append(all, f.items...)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	go func() { // closing ends the request
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := c.toLeader(ctx, &request{Op: opAlloc, Node: c.cfg.NodeID, Boot: c.boot, Items: all})
	if err != nil {
		return nil, err
	}
	results := make([]allocResult, 0, items)
	for _, r := range resp.Results {
		results = append(results, allocResult{First: r.First, Last: r.Last, Err: r.err()})
	}
	if len(results) != items {
		return nil, noLeader(ErrNotApplied, "allocation lost its answer")
	}
	return results, nil
}
