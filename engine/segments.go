package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of segment allocation. The cluster returns them; the resp package
// turns them into wire errors.
var (
	// ErrNoLeader: an allocation needs the Raft leader and there is none
	// (TRYAGAIN on the wire). Every such error is a *NoLeaderError, whose
	// Cause says why; errors.Is matches ErrNoLeader for any cause.
	ErrNoLeader = errors.New("no leader to allocate from, and nothing buffered")
	// ErrLeaseEnded: the node's worker lease ended, and buffered values
	// are handed out only within it (a cause of ErrNoLeader).
	ErrLeaseEnded = errors.New("the worker lease ended")
	// ErrRefillLate: no refill of a tag's buffer came within the wait
	// (a cause of ErrNoLeader).
	ErrRefillLate = errors.New("no refill within the wait")
	// ErrWouldGoBack: a SET below a value that may have been issued; values
	// never go back.
	ErrWouldGoBack = errors.New("values never go back")
	// ErrOverflow: the allocation would pass the largest int64.
	ErrOverflow = errors.New("increment or decrement would overflow")
	// ErrTagLimit: the command would create a tag past the cluster's
	// bound on the number of tags (--max-tags); nothing changed.
	ErrTagLimit = errors.New("tag limit reached")
)

// NoLeaderError is ErrNoLeader with its cause: errors.Is matches both
// ErrNoLeader and Cause. Its text is ErrNoLeader's, followed by ": " and
// Detail when Detail is not empty.
type NoLeaderError struct {
	Cause  error
	Detail string
}

func (e *NoLeaderError) Error() string {
	if e.Detail == "" {
		return ErrNoLeader.Error()
	}
	return ErrNoLeader.Error() + ": " + e.Detail
}

// Unwrap returns ErrNoLeader and the cause.
func (e *NoLeaderError) Unwrap() []error { return []error{ErrNoLeader, e.Cause} }

// SegmentSource allocates contiguous values of a tag, cluster-wide.
type SegmentSource interface {
	Allocate(ctx context.Context, tag string, n int64) (first, last int64, err error)
}

// Allocation is one tag's outcome in a BatchSource's answer.
type Allocation struct {
	First, Last int64
	Err         error
}

// BatchSource is a SegmentSource that also allocates for several tags at
// once: n[i] values of tags[i], one Allocation each, in order, each with
// its own outcome.
type BatchSource interface {
	AllocateEach(ctx context.Context, tags []string, n []int64) []Allocation
}

// MaxSegmentStep is the largest segment a buffer asks for at once. A tag
// drawn a thousand values a request at P32 (400M values/s) costs a few
// Raft entries a second at this step. It also bounds what a crash loses:
// a node's current and spare segments of a tag, at most 2 x MaxSegmentStep
// values, never issued (a gap).
const MaxSegmentStep = 100_000_000

// IdleBuffer is how long a tag's buffer outlives the last value handed out
// of it (RunIdleDrop): an idle tag is its high-water in the cluster's state
// and nothing more on this node. A buffer is dropped between IdleBuffer and
// 1.5 x IdleBuffer after its last value (sooner while the node holds more
// than MaxBuffers), the next request on the tag makes
// a new one (and waits for its first segment), and what the current and
// spare segments still held is a gap.
const IdleBuffer = time.Minute

// idleSweeps is how many sweeps, IdleBuffer/idleSweeps apart, find a buffer
// unused before it is dropped.
const idleSweeps = 2

// MaxBuffers bounds the buffers one node holds: past it, each further
// MaxBuffers/4 new buffers start a sweep at once (SweepIdle) instead of at
// its time, so that the buffers of a node whose clients touch many tags
// (a tag each made by a single INCR, say) are a bounded hot set: a buffer
// is then dropped once two sweeps found it unused, however recent, as an
// idle one is. About 200 bytes each (BufferBytes): 13 MiB at the bound,
// and 1.25 x MaxBuffers buffers at most while tags are made faster than
// the sweeps run.
const MaxBuffers = 1 << 16

// BufferBytes is about what one tag's buffer costs in memory: the buffer,
// its entry in the set of buffers, and the tag's name of a few bytes.
const BufferBytes = 200

// Segments serves per-tag values from local double buffers: the current
// segment and a spare fetched in the background once the current one is
// about 10% used, so a request almost never waits for the source.
type Segments struct {
	src     SegmentSource
	minStep int64
	now     Clock
	wait    time.Duration // longest a request waits for a refill

	mu         sync.RWMutex
	tags       map[string]*segmentBuffer
	maxBuffers int // MaxBuffers; tests lower it
	made       int // buffers made since the last early sweep; under mu

	sweeping atomic.Bool    // an early sweep runs (buffer)
	sweeps   sync.WaitGroup // early sweeps running (Close waits for them)

	stopped  atomic.Pointer[error] // set by Stop: every Next answers it
	leaseEnd atomic.Int64          // wall clock, Unix ms: buffered values are handed out only before it (0: no limit)

	refills    sync.WaitGroup     // refills in flight (startRefill)
	cancelFill context.CancelFunc // ends the refills in flight (Close)
	fillCtx    context.Context
}

// span is the values next..last; empty when next > last.
type span struct{ next, last int64 }

func (s span) left() int64 { return s.last - s.next + 1 }

// segmentBuffer is one tag's double buffer. All fields under its mutex.
type segmentBuffer struct {
	users     atomic.Int32 // callers between buffer and release
	mu        sync.Mutex
	cur       span
	spare     span
	step      int64
	refilling chan struct{} // closed when the refill in flight ends
	refillErr error
	gen       uint64    // raised by Fence: an allocation asked for before it is dropped on arrival
	high      int64     // largest value this buffer was given: handed out, buffered or dropped
	issued    int64     // largest value handed to a caller
	curSince  time.Time // when cur was put in use
	curSize   int64
	refills   int64
	idle      atomic.Uint32 // sweeps since a value was last handed out (SweepIdle); not under mu
}

// NewSegments serves tags from src; minStep is --segment-step.
func NewSegments(src SegmentSource, minStep int64, now Clock) *Segments {
	if minStep < 1 {
		minStep = 1000
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Segments{src: src, minStep: min(minStep, MaxSegmentStep), now: now, wait: 5 * time.Second, tags: map[string]*segmentBuffer{},
		maxBuffers: MaxBuffers, fillCtx: ctx, cancelFill: cancel}
}

// Close ends the refills in flight and waits for them: the source is not
// called once it returns. Close comes after the last Next returned (the
// callers are stopped first).
func (s *Segments) Close() {
	s.cancelFill()
	s.refills.Wait()
	s.sweeps.Wait()
}

func (s *Segments) buffer(tag string) *segmentBuffer {
	s.mu.RLock()
	b := s.tags[tag]
	if b != nil {
		b.users.Add(1)
	}
	s.mu.RUnlock()
	if b != nil {
		return b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b = s.tags[tag]; b == nil {
		b = &segmentBuffer{step: s.minStep, cur: span{1, 0}, spare: span{1, 0}}
		s.tags[tag] = b
		s.made++
		if len(s.tags) > s.maxBuffers && s.made >= s.maxBuffers/4 && s.sweeping.CompareAndSwap(false, true) {
			s.made = 0
			s.sweeps.Add(1)
			go func() {
				defer s.sweeps.Done()
				defer s.sweeping.Store(false)
				s.SweepIdle()
			}()
		}
	}
	b.users.Add(1)
	return b
}

// release ends a caller's hold on tag's buffer b, taken by buffer. With
// tryDrop it also removes b when no one holds it and it never held a value
// nor has an allocation in flight, so that a tag only tried (an allocation
// refused while the quorum is lost, a SET's fence on a tag this node never
// issued from) leaves nothing behind. The caller holds no lock.
func (s *Segments) release(tag string, b *segmentBuffer, tryDrop bool) {
	b.users.Add(-1)
	if !tryDrop {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.users.Load() != 0 || s.tags[tag] != b {
		return
	}
	b.mu.Lock()
	unused := b.high == 0 && b.issued == 0 && b.refilling == nil
	b.mu.Unlock()
	if unused {
		delete(s.tags, tag)
	}
}

// Next returns n contiguous values of tag. Values one node returns for one
// tag strictly increase. It waits for the source at most a bounded time
// (5s), whatever ctx allows.
func (s *Segments) Next(ctx context.Context, tag string, n int64) (first, last int64, err error) {
	b := s.buffer(tag)
	defer func() { s.release(tag, b, err != nil) }()
	b.mu.Lock()
	defer b.mu.Unlock()
	if stop := s.stopped.Load(); stop != nil {
		return 0, 0, *stop
	}
	if n > b.step {
		return s.direct(ctx, tag, b, n)
	}
	var deadline time.Time // set on the first wait: no clock read on the fast path
	for b.cur.left() < n {
		if b.spare.left() >= n {
			s.rotate(b)
			continue
		}
		if b.refilling == nil {
			s.startRefill(tag, b)
		}
		done := b.refilling
		if deadline.IsZero() {
			deadline = time.Now().Add(s.wait)
		}
		b.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		case <-time.After(time.Until(deadline)):
		}
		b.mu.Lock()
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		if b.refillErr != nil && b.spare.left() < n && b.refilling == nil {
			err := b.refillErr
			b.refillErr = nil
			if errors.Is(err, ErrOverflow) {
				// A whole step no longer fits below the int64 edge; n may.
				return s.direct(ctx, tag, b, n)
			}
			return 0, 0, err
		}
		if !time.Now().Before(deadline) && b.spare.left() < n {
			return 0, 0, &NoLeaderError{Cause: ErrRefillLate}
		}
	}
	return s.take(tag, b, n)
}

// NextRun returns between 1 and n contiguous values of tag: as many as the
// current segment still holds, so that a run of single requests (a
// pipeline of INCRs) is served in one call and leaves no gap at the end of
// a segment. With the current segment used up it is Next(ctx, tag, 1).
func (s *Segments) NextRun(ctx context.Context, tag string, n int64) (first, last int64, err error) {
	b := s.buffer(tag)
	b.mu.Lock()
	if left := b.cur.left(); left > 0 && s.stopped.Load() == nil {
		first, last, err = s.take(tag, b, min(n, left))
		b.mu.Unlock()
		s.release(tag, b, err != nil)
		return first, last, err
	}
	b.mu.Unlock()
	s.release(tag, b, false)
	return s.Next(ctx, tag, 1)
}

// SetLeaseEnd sets when buffered values stop being handed out: the end of
// the node's worker lease, which the cluster renews while the node is a
// member that reaches it. A node removed from its cluster while cut off
// (it never hears of it) thus stops at its lease end, as its IDs do, and a
// SET after the removal waits for that. It only moves forward.
func (s *Segments) SetLeaseEnd(t time.Time) {
	end := t.UnixMilli()
	for {
		cur := s.leaseEnd.Load()
		if end <= cur || s.leaseEnd.CompareAndSwap(cur, end) {
			return
		}
	}
}

// leaseEnded is the error for a value asked for at or past the lease end,
// nil before it.
func (s *Segments) leaseEnded() error {
	end := s.leaseEnd.Load()
	if end == 0 {
		return nil
	}
	if now := s.now().UnixMilli(); now >= end {
		return &NoLeaderError{Cause: ErrLeaseEnded, Detail: fmt.Sprintf("the worker lease ended %d ms ago (buffered values are handed out only within it)", now-end)}
	}
	return nil
}

// take hands out n values of the current segment, which holds them, and
// starts the refill once the segment is about 10% used; past the lease end
// it hands out nothing. Caller holds b.mu.
func (s *Segments) take(tag string, b *segmentBuffer, n int64) (first, last int64, err error) {
	if err := s.leaseEnded(); err != nil {
		return 0, 0, err
	}
	first = b.cur.next
	b.cur.next += n
	b.issued = first + n - 1
	if b.idle.Load() != 0 { // a load, no store, on the fast path
		b.idle.Store(0)
	}
	if b.refilling == nil && b.spare.left() <= 0 && b.curSize > 0 &&
		b.curSize-b.cur.left() >= b.curSize/10 {
		s.startRefill(tag, b)
	}
	return first, first + n - 1, nil
}

// direct allocates n values straight from the source. Caller holds b.mu;
// direct releases it around the call (the source may be a network call to
// the leader, which may be waiting in Fence for b.mu) and holds it again on
// return.
//
// Meanwhile others may have handed out values or refilled. A result above
// all that is handed out, and whatever is buffered below its end is
// dropped, so values keep increasing in the order they leave. A result
// below it was allocated before those, and one asked for before a Fence
// may lie below a SET that lowered the tag: either is dropped (a gap) and
// the source asked again.
func (s *Segments) direct(ctx context.Context, tag string, b *segmentBuffer, n int64) (int64, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	for {
		gen := b.gen
		b.mu.Unlock()
		first, last, err := s.src.Allocate(ctx, tag, n)
		b.mu.Lock()
		if err != nil {
			return 0, 0, err
		}
		if gen == b.gen && first > b.issued {
			for _, sp := range []*span{&b.cur, &b.spare} {
				sp.next = max(sp.next, last+1)
			}
			b.high = max(b.high, last)
			b.issued = last
			b.idle.Store(0)
			return first, last, nil
		}
	}
}

// rotate makes the spare current, adapting the step to how fast the last
// segment went: doubled when it lasted under 2s, halved over 30s.
func (s *Segments) rotate(b *segmentBuffer) {
	now := s.now()
	if b.curSize > 0 {
		lasted := now.Sub(b.curSince)
		switch {
		case lasted < 2*time.Second:
			b.step = min(b.step*2, MaxSegmentStep)
		case lasted > 30*time.Second:
			b.step = max(b.step/2, s.minStep)
		}
	}
	b.cur, b.spare = b.spare, span{1, 0}
	b.curSince, b.curSize = now, b.cur.left()
}

// startRefill asks the source for the next segment in the background.
// Caller holds b.mu.
func (s *Segments) startRefill(tag string, b *segmentBuffer) {
	done := make(chan struct{})
	b.refilling = done
	step, gen := b.step, b.gen
	s.refills.Add(1)
	go func() {
		defer s.refills.Done()
		ctx, cancel := context.WithTimeout(s.fillCtx, s.wait)
		first, last, err := s.src.Allocate(ctx, tag, step)
		cancel()
		s.landRefill(b, gen, done, first, last, err)
	}()
}

// landRefill ends the refill done of b, asked for at gen, with its
// outcome. The caller does not hold b.mu.
func (s *Segments) landRefill(b *segmentBuffer, gen uint64, done chan struct{}, first, last int64, err error) {
	b.mu.Lock()
	b.refills++
	b.refillErr = err
	// A segment from before a direct allocation lies below what this
	// node already handed out, and one asked for before a Fence may lie
	// below a SET that lowered the tag: drop either, a gap.
	if err == nil && gen == b.gen && first > b.high {
		b.spare = span{first, last}
		b.high = last
	}
	b.refilling = nil
	b.mu.Unlock()
	close(done)
}

// Buffered reports whether tag has a buffer on this node: values, or an
// allocation on the way.
func (s *Segments) Buffered(tag string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tags[tag] != nil
}

// Prefetch starts the first segment of each of tags that holds no values
// and has no allocation in flight, and returns without waiting: with a
// BatchSource, all of them in one call (one log entry, one request to the
// leader), so that a pipeline of many new tags costs a few allocation
// rounds instead of one each. The requests for those tags then find their
// segment arriving, as after a prefetch of a spare.
func (s *Segments) Prefetch(tags []string) {
	if s.stopped.Load() != nil {
		return
	}
	batch, isBatch := s.src.(BatchSource)
	type fill struct {
		b    *segmentBuffer
		gen  uint64
		done chan struct{}
	}
	var fills []fill
	var fillTags []string
	var steps []int64
	for _, tag := range tags {
		b := s.buffer(tag)
		b.mu.Lock()
		if b.refilling == nil && b.cur.left() <= 0 && b.spare.left() <= 0 {
			if isBatch {
				done := make(chan struct{})
				b.refilling = done
				fills = append(fills, fill{b, b.gen, done})
				fillTags, steps = append(fillTags, tag), append(steps, b.step)
			} else {
				s.startRefill(tag, b)
			}
		}
		b.mu.Unlock()
		s.release(tag, b, false)
	}
	if len(fills) == 0 {
		return
	}
	s.refills.Add(1)
	go func() {
		defer s.refills.Done()
		ctx, cancel := context.WithTimeout(s.fillCtx, s.wait)
		got := batch.AllocateEach(ctx, fillTags, steps)
		cancel()
		for i, f := range fills {
			a := Allocation{Err: &NoLeaderError{Cause: ErrRefillLate, Detail: "a batch allocation lost its answer"}}
			if len(got) == len(fills) {
				a = got[i]
			}
			s.landRefill(f.b, f.gen, f.done, a.First, a.Last, a.Err)
		}
	}()
}

// Stop drops every buffered value and makes every later Next answer err:
// the node may hand out no more values (it was forgotten by its cluster).
func (s *Segments) Stop(err error) {
	s.stopped.Store(&err)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.tags {
		b.mu.Lock()
		b.cur, b.spare = span{1, 0}, span{1, 0}
		b.mu.Unlock()
	}
}

// Fence drops every value of tag this node holds but has not handed out,
// and every allocation asked for and not yet arrived, so that from now on
// it hands out only values the source allocates after this call. It
// returns what Issued returns: a SET may then lower the tag to anything at
// or above the largest value every node handed out (values reserved but
// never issued do not count: docs/commands.md, SET).
func (s *Segments) Fence(tag string) (issued int64) {
	b := s.held(tag)
	if b == nil {
		return 0
	}
	b.mu.Lock()
	b.cur, b.spare = span{1, 0}, span{1, 0}
	b.gen++
	b.high = b.issued
	issued = b.issued
	b.mu.Unlock()
	s.release(tag, b, issued == 0)
	return issued
}

// Issued returns the largest value of tag that this node's buffer of the
// tag handed to a caller, dropping nothing: a SET asks it first, so that a
// SET refused (below a value issued) leaves the buffers as they were.
//
// A value above 0 is above every value of the tag this process handed out:
// a buffer hands out only values allocated after it was made, which lie
// above every value handed out before (a SET never lowers a tag below
// one). 0 vouches for nothing: the tag has no buffer (never had one, or it
// was dropped idle, RunIdleDrop) or its buffer has handed out nothing yet,
// and every value this node was allocated of the tag may have been issued.
func (s *Segments) Issued(tag string) int64 {
	s.mu.RLock()
	b := s.tags[tag]
	s.mu.RUnlock()
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.issued
}

// held is tag's buffer, held as buffer holds it, or nil when the tag has
// none (a fence makes none).
func (s *Segments) held(tag string) *segmentBuffer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b := s.tags[tag]
	if b != nil {
		b.users.Add(1)
	}
	return b
}

// RunIdleDrop sweeps the buffers every IdleBuffer/2 until ctx ends
// (SweepIdle), so that a tag that is not issued from keeps no buffer.
func (s *Segments) RunIdleDrop(ctx context.Context) {
	t := time.NewTicker(IdleBuffer / idleSweeps)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.SweepIdle()
		}
	}
}

// SweepIdle drops every buffer that handed out no value since the sweep
// before the last one, with no caller holding it and no allocation in
// flight, and returns how many it dropped. Its values left are a gap; the
// node no longer knows what it handed out of the tag (Issued). It holds
// the lock on the set of buffers in short turns (sweepBatch buffers), not
// for the whole sweep.
func (s *Segments) SweepIdle() (dropped int) {
	type idleBuffer struct {
		tag string
		b   *segmentBuffer
	}
	var idle []idleBuffer
	s.mu.RLock()
	for tag, b := range s.tags {
		if b.idle.Add(1) >= idleSweeps {
			idle = append(idle, idleBuffer{tag, b})
		}
	}
	s.mu.RUnlock()
	for len(idle) > 0 {
		batch := idle[:min(len(idle), sweepBatch)]
		idle = idle[len(batch):]
		// buffer takes its hold under s.mu: with s.mu held here, a buffer
		// no one holds stays unheld until it is gone from the map.
		s.mu.Lock()
		for _, c := range batch {
			if s.tags[c.tag] != c.b || c.b.users.Load() != 0 || c.b.idle.Load() < idleSweeps {
				continue
			}
			c.b.mu.Lock()
			inFlight := c.b.refilling != nil
			c.b.mu.Unlock()
			if !inFlight {
				delete(s.tags, c.tag)
				dropped++
			}
		}
		s.mu.Unlock()
	}
	return dropped
}

// sweepBatch is how many buffers SweepIdle drops per turn of the lock.
const sweepBatch = 1024

// Totals are the number of tags with a buffer on this node and the values
// their buffers hold (current and spare segments), in one pass that copies
// nothing (a scrape of the metrics).
func (s *Segments) Totals() (buffers int, values int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.tags {
		b.mu.Lock()
		values += max(b.cur.left(), 0) + max(b.spare.left(), 0)
		b.mu.Unlock()
	}
	return len(s.tags), values
}

// Buffers is the number of tags with a buffer on this node.
func (s *Segments) Buffers() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.tags)
}

// SegmentStatus is one tag's buffer, for INFO.
type SegmentStatus struct {
	Tag       string
	Left      int64 // values left in the current segment
	SpareLeft int64 // values in the spare
	Step      int64
	Refills   int64
	Refilling bool
}

// Status lists the buffers.
func (s *Segments) Status() []SegmentStatus {
	s.mu.RLock()
	tags := make(map[string]*segmentBuffer, len(s.tags))
	for k, v := range s.tags {
		tags[k] = v
	}
	s.mu.RUnlock()
	out := make([]SegmentStatus, 0, len(tags))
	for tag, b := range tags {
		b.mu.Lock()
		out = append(out, SegmentStatus{Tag: tag, Left: max(b.cur.left(), 0), SpareLeft: max(b.spare.left(), 0),
			Step: b.step, Refills: b.refills, Refilling: b.refilling != nil})
		b.mu.Unlock()
	}
	return out
}
