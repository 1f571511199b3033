package cluster

import "time"

// groupHold is the longest a batch waits for more requests.
const groupHold = 5 * time.Millisecond

// maxBatchItems is the most items one batch gathers (one log entry, or
// one request to the leader).
const maxBatchItems = 1024

// gather takes the requests queued on in, one batch at a time, for a loop
// that handles a batch as a whole (one log entry: runGroupCommit; one
// request to the leader: runForwards). The more requests arrive while a
// batch is handled, the more the next one carries. The next batch waits
// until it holds the requests the last one held as well as those already
// queued when the last one was handled, for at most as long as the last
// one took (and never over groupHold): clients that each wait for their
// answer come back together, and one batch then carries them all instead
// of leaving them to the batch after, each with its own synced write or
// round trip. A wait that ends without them (requests that arrive on
// their own, not in answer to the last batch) makes the next 1, 3, 7, ...
// up to 63 batches go without waiting, so that such requests seldom wait;
// a batch that gets them, waiting or not, ends the skipping. A lone
// client, whose batches hold one request, never waits.
type gather struct {
	in   <-chan *allocReq
	stop <-chan struct{}
	hold *time.Timer
	max  time.Duration // the longest wait: groupHold (tests raise it)

	want          int           // requests the next batch waits for
	took          time.Duration // how long the last batch took
	skip, backoff int           // batches left that do not wait; how many a fruitless wait skips
}

func newGather(in <-chan *allocReq, stop <-chan struct{}) *gather {
	hold := time.NewTimer(groupHold)
	hold.Stop()
	return &gather{in: in, stop: stop, hold: hold, max: groupHold}
}

// next waits for a request and returns the batch it starts, with its item
// count; nil once stop is closed with no request taken.
func (g *gather) next() (batch []*allocReq, items int) {
	select {
	case <-g.stop:
		return nil, 0
	case r := <-g.in:
		batch, items = append(batch, r), len(r.items)
	}
	var held <-chan time.Time // hold's channel once this batch waits
	late := false             // the wait ended before the requests came
drain:
	for items < maxBatchItems {
		select {
		case r := <-g.in:
			batch, items = append(batch, r), items+len(r.items)
			continue
		default:
		}
		if len(batch) >= g.want || g.skip > 0 {
			break
		}
		if held == nil {
			g.hold.Reset(min(g.took, g.max))
			held = g.hold.C
		}
		select {
		case r := <-g.in:
			batch, items = append(batch, r), items+len(r.items)
		case <-held:
			late = true
			break drain
		case <-g.stop:
			break drain
		}
	}
	g.hold.Stop()
	switch {
	case g.skip > 0:
		g.skip--
	case late:
		g.backoff = min(2*g.backoff+1, 63)
		g.skip = g.backoff
	default: // it holds what it was to wait for
		g.backoff = 0
	}
	return batch, items
}

// handled records the batch of n requests just handled, in took: it is
// called before any of its answers goes out, so that none is back yet.
func (g *gather) handled(n int, took time.Duration) {
	g.took, g.want = took, n+len(g.in)
}
