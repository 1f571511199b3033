package idclient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// run is count values: next, next+step, next+2*step, ... (step >= 1).
// NEXTIDRUNS answers runs of step 1, NEXTSEG one run; an ID list (NEXTID,
// GENEID) is cut into runs where the step between IDs stays the same, so
// that a gene's IDs, a gene step apart, are few runs too.
type run struct {
	next  int64
	step  int64
	count int64
}

// last is the run's last value.
func (r run) last() int64 { return r.next + (r.count-1)*r.step }

// appendRuns appends the increasing values vals to dst as runs.
func appendRuns(dst []run, vals []int64) []run {
	for i := 0; i < len(vals); {
		r := run{next: vals[i], step: 1, count: 1}
		if i+1 < len(vals) && vals[i+1] > vals[i] {
			r.step = vals[i+1] - vals[i]
			for i+int(r.count) < len(vals) && vals[i+int(r.count)]-vals[i+int(r.count)-1] == r.step {
				r.count++
			}
		}
		dst = append(dst, r)
		i += int(r.count)
	}
	return dst
}

// countOf is the number of values in runs.
func countOf(runs []run) int64 {
	var n int64
	for _, r := range runs {
		n += r.count
	}
	return n
}

// chunk is what one request brought back, as runs.
type chunk struct {
	runs []run // the values not yet taken, increasing
	size int   // how many
	born time.Time
	// skipped: Strict has dropped the values at or below the last one
	// handed out; every value left is above whatever it hands out next.
	skipped bool
}

// fetchFunc sends one request for n values.
type fetchFunc func(ctx context.Context, n int) (chunk, error)

// fetchCall is one request in flight; done closes when it has ended and
// its values, if any, are in the buffer.
type fetchCall struct {
	done chan struct{}
	err  error
}

// localCache is what one P took from the process buffer; only the
// goroutine that took it out of the sync.Pool touches it.
type localCache struct {
	runs    []run
	pos     int   // runs[pos:] are left
	expires int64 // on the Client's coarse clock: the oldest value's born + MaxAge
}

// Sequence hands out the values of one source: snowflake IDs, the IDs of
// one gene, or the values of one tag. Its levels are described in the
// package documentation; Options.Buffer switches them.
type Sequence struct {
	c        *Client
	fetch    fetchFunc
	opt      Buffer
	maxAge   time.Duration // 0: values never go stale (segments)
	maxBatch int           // the command's limit

	closed atomic.Bool
	pool   sync.Pool // *localCache, per P

	fetches atomic.Int64 // requests sent
	waits   atomic.Int64 // takes that found the buffer empty and waited
	dropped atomic.Int64 // values dropped: stale, out of order, or at Close

	mu       sync.Mutex
	chunks   []chunk
	avail    int
	batch    int
	inflight *fetchCall // the shared request, singleflight and prefetch
	lastSent time.Time  // when the last request was sent, for the rate
	lastOut  int64      // Strict: the last value handed out
	hasOut   bool
	// orderRestarts: IDs, whose order restarts when a node takes a fresh
	// worker ID (tag values never go back). belowSince: Strict has been
	// dropping whole chunks at or below lastOut since then (zero: not).
	orderRestarts bool
	belowSince    time.Time
}

// strictRestartAfter is how long a Strict sequence of IDs drops whole
// batches at or below its last ID before it takes them as a restarted
// order (ErrOrderRestarted): longer than another node's clock is behind
// after a failover (its --max-borrow, 1s by default).
const strictRestartAfter = 2 * time.Second

func newSequence(c *Client, fetch fetchFunc, opt Buffer, maxAge time.Duration, maxBatch int) *Sequence {
	opt = opt.withDefaults()
	s := &Sequence{c: c, fetch: fetch, opt: opt, maxAge: maxAge, maxBatch: maxBatch}
	s.batch = min(opt.Batch, maxBatch)
	s.pool.New = func() any { return &localCache{runs: make([]run, 0, 4)} }
	return s
}

// SequenceStats counts what a Sequence did.
type SequenceStats struct {
	Fetches int64 // requests sent to the server
	Waits   int64 // takes that found the process buffer empty and waited for a request
	Dropped int64 // values never handed out: stale, below a Strict sequence's last, or buffered at Close
	Batch   int   // the current batch size
}

// Stats reports the counters.
func (s *Sequence) Stats() SequenceStats {
	s.mu.Lock()
	batch := s.batch
	s.mu.Unlock()
	return SequenceStats{Fetches: s.fetches.Load(), Waits: s.waits.Load(), Dropped: s.dropped.Load(), Batch: batch}
}

// Next returns the next value. It waits for the server only when the
// buffers are empty, and then at most until ctx ends; a server error
// (TRYAGAIN, CLOCKBACK, a connection error on every node) is returned only
// when no buffered value is left.
func (s *Sequence) Next(ctx context.Context) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if s.opt.Local <= 0 {
		var one [1]run
		runs, _, err := s.take(ctx, one[:0], 1)
		if err != nil {
			return 0, err
		}
		return runs[0].next, nil
	}
	lc := s.pool.Get().(*localCache)
	// The coarse clock costs an atomic load where time.Since costs a clock
	// read, the largest part of a take from a per-P cache.
	if lc.pos < len(lc.runs) && s.maxAge > 0 && s.c.coarseNow() > lc.expires {
		s.dropped.Add(countOf(lc.runs[lc.pos:]))
		lc.pos = len(lc.runs)
	}
	if lc.pos == len(lc.runs) {
		runs, born, err := s.take(ctx, lc.runs[:0], s.opt.Local)
		if err != nil {
			s.pool.Put(lc)
			return 0, err
		}
		lc.runs, lc.pos, lc.expires = runs, 0, int64(born.Sub(s.c.start)+s.maxAge)
	}
	r := &lc.runs[lc.pos]
	v := r.next
	if r.count--; r.count == 0 {
		lc.pos++
	} else {
		r.next += r.step
	}
	s.pool.Put(lc)
	return v, nil
}

// take moves up to want values from the process buffer to dst, as runs,
// fetching when it is empty. born is the time the oldest of them was
// requested.
func (s *Sequence) take(ctx context.Context, dst []run, want int) (runs []run, born time.Time, err error) {
	waited := false
	for {
		s.mu.Lock()
		if s.closed.Load() {
			s.mu.Unlock()
			return dst, born, ErrClosed
		}
		now := time.Now()
		s.c.coarse.Store(int64(now.Sub(s.c.start)))
		s.dropStale(now)
		if s.avail > 0 {
			dst, born = s.pop(dst, want)
			if len(dst) > 0 {
				if s.opt.Prefetch > 0 && s.inflight == nil && float64(s.avail) < s.opt.Prefetch*float64(s.batch) {
					s.inflight = s.startFetch(now, 0)
				}
				s.mu.Unlock()
				return dst, born, nil
			}
		}
		if s.orderRestarts && !s.belowSince.IsZero() && now.Sub(s.belowSince) > strictRestartAfter {
			s.hasOut, s.belowSince = false, time.Time{}
			s.mu.Unlock()
			return dst, born, ErrOrderRestarted
		}
		var call *fetchCall
		switch {
		case !s.opt.NoSingleflight && s.inflight != nil:
			call = s.inflight
		case !s.opt.NoSingleflight:
			call = s.startFetch(now, want)
			s.inflight = call
		default:
			call = s.startFetch(now, want)
		}
		s.mu.Unlock()
		if !waited {
			waited = true
			s.waits.Add(1)
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			return dst, born, ctx.Err()
		}
		if call.err != nil {
			s.mu.Lock()
			empty := s.avail == 0
			s.mu.Unlock()
			if empty {
				return dst, born, call.err
			}
		}
	}
}

// pop moves up to want values from the front of the buffer to dst; s.mu
// is held.
func (s *Sequence) pop(dst []run, want int) ([]run, time.Time) {
	var born time.Time
	for len(s.chunks) > 0 && want > 0 {
		c := &s.chunks[0]
		if born.IsZero() || c.born.Before(born) {
			born = c.born
		}
		if s.opt.Strict && s.hasOut && !c.skipped {
			s.skipTo(c, s.lastOut)
			c.skipped = true
			if len(c.runs) == 0 && s.belowSince.IsZero() {
				s.belowSince = time.Now()
			}
		}
		for want > 0 && len(c.runs) > 0 {
			r := &c.runs[0]
			k := min(int64(want), r.count)
			dst = append(dst, run{next: r.next, step: r.step, count: k})
			if k == r.count {
				c.runs = c.runs[1:]
			} else {
				r.next += k * r.step
				r.count -= k
			}
			want -= int(k)
			c.size -= int(k)
			s.avail -= int(k)
		}
		if s.opt.Strict && len(dst) > 0 {
			s.lastOut, s.hasOut = dst[len(dst)-1].last(), true
			s.belowSince = time.Time{}
		}
		if len(c.runs) == 0 {
			s.chunks[0] = chunk{}
			s.chunks = s.chunks[1:]
		}
	}
	return dst, born
}

// skipTo drops the values of c at or below floor (Strict: a value from
// another node, after a failover, may lie below one already handed out).
func (s *Sequence) skipTo(c *chunk, floor int64) {
	var n int64
	for len(c.runs) > 0 && c.runs[0].next <= floor {
		r := &c.runs[0]
		if r.last() <= floor {
			n += r.count
			c.runs = c.runs[1:]
			continue
		}
		k := (floor-r.next)/r.step + 1
		r.next += k * r.step
		r.count -= k
		n += k
	}
	c.size -= int(n)
	s.avail -= int(n)
	s.dropped.Add(n)
}

// dropStale drops chunks older than maxAge; s.mu is held.
func (s *Sequence) dropStale(now time.Time) {
	if s.maxAge <= 0 {
		return
	}
	for len(s.chunks) > 0 && now.Sub(s.chunks[0].born) > s.maxAge {
		n := s.chunks[0].size
		s.avail -= n
		s.dropped.Add(int64(n))
		s.chunks[0] = chunk{}
		s.chunks = s.chunks[1:]
	}
}

// startFetch sends a request in the background for the current batch (at
// least want values); s.mu is held. It adapts the batch to the rate
// first: a batch that lasted under half of Options.Buffer.Period doubles
// the next one, one that lasted over four Periods halves it.
func (s *Sequence) startFetch(now time.Time, want int) *fetchCall {
	if !s.opt.FixedBatch && !s.lastSent.IsZero() {
		switch lasted := now.Sub(s.lastSent); {
		case lasted < s.opt.Period/2:
			s.batch = min(s.batch*2, s.opt.MaxBatch, s.maxBatch)
		case lasted > 4*s.opt.Period:
			s.batch = max(s.batch/2, min(s.opt.Batch, s.maxBatch))
		}
	}
	s.lastSent = now
	n := min(max(s.batch, want), s.maxBatch)
	call := &fetchCall{done: make(chan struct{})}
	s.fetches.Add(1)
	s.c.fetching.Add(1)
	go s.runFetch(call, n)
	return call
}

func (s *Sequence) runFetch(call *fetchCall, n int) {
	defer s.c.fetching.Done()
	ctx, cancel := context.WithTimeout(context.Background(), s.c.opt.Timeout)
	c, err := s.fetch(ctx, n)
	cancel()
	s.mu.Lock()
	switch {
	case err != nil:
	case s.closed.Load():
		s.dropped.Add(int64(c.size))
	default:
		s.chunks = append(s.chunks, c)
		s.avail += c.size
	}
	if s.inflight == call {
		s.inflight = nil
	}
	call.err = err
	s.mu.Unlock()
	close(call.done)
}

// close drops the buffered values; a request in flight delivers nothing.
// Values in per-P caches are never handed out either: Next checks closed
// first.
func (s *Sequence) close() {
	s.closed.Store(true)
	s.mu.Lock()
	s.dropped.Add(int64(s.avail))
	s.chunks, s.avail = nil, 0
	s.mu.Unlock()
}
