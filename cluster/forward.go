package cluster

import (
	"context"
	"time"
)

// A follower forwards allocations to the leader in batches, as the leader
// commits them in groups: while a request to the leader is in flight, the
// allocations that come meanwhile wait, and the next request carries all
// of them (up to maxForwardItems), each with its own result. A burst of
// connections making new tags through a follower costs the leader a few
// requests on a stream already open, not a stream and a handshake each.
const maxForwardItems = 1024

// forward is one caller's allocation waiting to be forwarded.
type forward struct {
	ctx   context.Context
	items []allocItem
	done  chan allocDone
}

// forwardAlloc sends items to the leader in the next batch: one result
// per item, or an error for all of them. It returns when ctx ends, the
// allocation then still on its way (a gap if it commits, never a repeat).
func (c *Cluster) forwardAlloc(ctx context.Context, items []allocItem) ([]allocResult, error) {
	f := &forward{ctx: ctx, items: items, done: make(chan allocDone, 1)}
	select {
	case c.forwards <- f:
	case <-ctx.Done():
		return nil, noLeader(ErrNotApplied, "%v", ctx.Err())
	case <-c.stop:
		return nil, noLeader(ErrLeaderUnknown, "node %s is closing", c.cfg.NodeID)
	}
	select {
	case d := <-f.done:
		return d.results, d.err
	case <-ctx.Done():
		return nil, noLeader(ErrNotApplied, "%v", ctx.Err())
	}
}

// runForwards drains the waiting allocations into one request to the
// leader at a time, as runGroupCommit drains them into log entries: the
// next request waits until it carries as many items as the last one
// carried and those queued when it came back, for at most as long as the
// last one took (never over groupHold). Callers that each wait for their
// answer come back together, and one request then carries them all
// instead of leaving most of them to the request after; a lone caller,
// whose requests carry one item, never waits.
func (c *Cluster) runForwards() {
	defer c.stopped.Done()
	hold := time.NewTimer(groupHold)
	hold.Stop()
	want := 0              // items the next request waits for: see above
	var took time.Duration // how long the last request took
	for {
		var batch []*forward
		items := 0
		add := func(f *forward) {
			if f.ctx.Err() != nil {
				return // its caller is gone: nothing to allocate for it
			}
			batch = append(batch, f)
			items += len(f.items)
		}
		for len(batch) == 0 {
			select {
			case f := <-c.forwards:
				add(f)
			case <-c.stop:
				return
			}
		}
		var held <-chan time.Time // hold's channel once this request waits
	drain:
		for items < maxForwardItems {
			select {
			case f := <-c.forwards:
				add(f)
				continue
			default:
			}
			if items >= want {
				break
			}
			if held == nil {
				hold.Reset(min(took, groupHold))
				held = hold.C
			}
			select {
			case f := <-c.forwards:
				add(f)
			case <-held:
				break drain
			case <-c.stop:
				break drain
			}
		}
		hold.Stop()
		start := time.Now()
		results, err := c.sendForwards(batch, items)
		took = time.Since(start)
		// Counted before any answer goes out, so none of them is back yet.
		want = items + len(c.forwards)
		for _, f := range batch {
			if err != nil {
				f.done <- allocDone{err: err}
				continue
			}
			f.done <- allocDone{results: results[:len(f.items)]}
			results = results[len(f.items):]
		}
	}
}

// sendForwards sends batch's items to the leader in one request, until
// the last of its callers' deadlines: one result per item, or an error.
func (c *Cluster) sendForwards(batch []*forward, items int) ([]allocResult, error) {
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
