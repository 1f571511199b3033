package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/testproc"
)

// counterSource is a SegmentSource over one in-memory counter per tag.
type counterSource struct {
	mu    sync.Mutex
	high  map[string]int64
	calls int
	down  bool
}

func (c *counterSource) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return 0, 0, ErrNoLeader
	}
	if c.high == nil {
		c.high = map[string]int64{}
	}
	c.calls++
	first := c.high[tag] + 1
	c.high[tag] += n
	return first, c.high[tag], nil
}

func TestSegmentsIncreaseAndPrefetch(t *testing.T) {
	src := &counterSource{}
	clock := newFakeClock()
	s := NewSegments(src, 100, clock.Now)
	ctx := context.Background()
	var last int64
	for i := range 5000 {
		n := int64(1 + i%3)
		first, l, err := s.Next(ctx, "orders", n)
		if err != nil {
			t.Fatal(err)
		}
		if first <= last || l-first+1 != n {
			t.Fatalf("got %d..%d after %d", first, l, last)
		}
		last = l
		if i%500 == 0 {
			clock.Step(10 * time.Millisecond)
		}
	}
	// The step doubled while segments went fast: far fewer calls than 10000/100.
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	if calls > 20 {
		t.Fatalf("%d source calls for 10000 values", calls)
	}
	// A large request goes straight to the source, and later values stay above it.
	first, l, err := s.Next(ctx, "orders", 1_000_000)
	if err != nil || first <= last {
		t.Fatalf("direct: %d..%d %v", first, l, err)
	}
	next, _, err := s.Next(ctx, "orders", 1)
	if err != nil || next <= l {
		t.Fatalf("after direct %d..%d, got %d (%v)", first, l, next, err)
	}
}

func TestSegmentsServeBufferThenTryAgain(t *testing.T) {
	src := &counterSource{}
	s := NewSegments(src, 1000, time.Now)
	s.wait = 200 * time.Millisecond
	ctx := context.Background()
	if _, _, err := s.Next(ctx, "t", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let a prefetch land, if any
	src.mu.Lock()
	src.down = true
	src.mu.Unlock()
	served := 1
	for {
		_, _, err := s.Next(ctx, "t", 1)
		if errors.Is(err, ErrNoLeader) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		served++
		if served > 10000 {
			t.Fatal("never ran dry")
		}
	}
	if served < 1000 {
		t.Fatalf("only %d values served from the buffer with the source down", served)
	}
}

func TestSegmentsConcurrentNeverRepeat(t *testing.T) {
	src := &counterSource{}
	s := NewSegments(src, 10, time.Now)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]bool{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				first, last, err := s.Next(context.Background(), "t", int64(1+i%5))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for v := first; v <= last; v++ {
					if seen[v] {
						t.Errorf("repeat %d", v)
					}
					seen[v] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// fsmSource models the cluster as the segment buffers meet it: one lock, the
// state machine's, that an allocation and a SET both take. Allocate may
// first wait at a gate the test opens one caller at a time (a forwarded
// call that needs the state machine), or take a while (a slow network).
type fsmSource struct {
	mu    sync.Mutex // the state machine's lock
	high  map[string]int64
	gate  chan struct{} // when set, Allocate waits for a token or for open
	open  chan struct{} // closed: the gate lets everyone through
	delay time.Duration
}

func newFSMSource(gated bool, delay time.Duration) *fsmSource {
	f := &fsmSource{high: map[string]int64{}, open: make(chan struct{}), delay: delay}
	if gated {
		f.gate = make(chan struct{})
	}
	return f
}

func (f *fsmSource) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-f.open:
		}
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	first := f.high[tag] + 1
	f.high[tag] += n
	return first, f.high[tag], nil
}

// set is SET tag (high-water + up to 3 segments): it lets the gated
// allocations through, twice, 5ms apart (an allocation that waits at the
// gate across a Fence is dropped when it lands, and SETs back to back
// would starve them all), then fences the buffer and raises the tag while
// holding the state machine's lock.
func (f *fsmSource) set(s *Segments, tag string, r *rand.Rand) int64 {
	for range 2 {
		for f.gate != nil {
			select {
			case f.gate <- struct{}{}:
				continue
			default:
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.high[tag] + 1 + r.Int64N(30)
	f.high[tag] = v
	s.Fence(tag)
	return v
}

// TestSegmentsDirectDoesNotHoldTheBufferAcrossTheSource: Next(tag, n > step)
// does not hold the tag's buffer lock across an allocation that needs the
// state machine, since the state machine, applying a SET, waits for that
// buffer lock in Fence: holding it would deadlock.
func TestSegmentsDirectDoesNotHoldTheBufferAcrossTheSource(t *testing.T) {
	testproc.Long(t)
	const step = 10
	for _, tc := range []struct {
		name  string
		gated bool
		delay time.Duration
	}{
		{"allocation blocks until released", true, 0},
		{"allocation takes 1ms", false, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFSMSource(tc.gated, tc.delay)
			// A clock that moves 10s between reads keeps the step at 10
			// (segments lasting 2s..30s), so step*5 always goes direct.
			var ticks atomic.Int64
			base := time.Now()
			s := NewSegments(src, step, func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * 10 * time.Second) })
			const tag = "x"
			var floor atomic.Int64 // the v of the latest SET whose Fence returned
			type grant struct{ first, last int64 }
			const workers = 4
			grants := make([][]grant, workers)
			deadline := time.Now().Add(2 * time.Second)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var last int64
					for i := 0; time.Now().Before(deadline); i++ {
						n := int64(1 + i%3)
						if (w+i)%2 == 0 {
							n = step * 5
						}
						f := floor.Load()
						first, l, err := s.Next(context.Background(), tag, n)
						if err != nil {
							t.Errorf("worker %d: Next(%d): %v", w, n, err)
							return
						}
						switch {
						case l-first+1 != n:
							t.Errorf("worker %d: Next(%d) = %d..%d", w, n, first, l)
						case first <= f:
							t.Errorf("worker %d: %d..%d handed out after SET %d fenced the buffer", w, first, l, f)
						case first <= last:
							t.Errorf("worker %d: %d..%d after %d", w, first, l, last)
						}
						if t.Failed() {
							return
						}
						last = l
						grants[w] = append(grants[w], grant{first, l})
					}
				}()
			}
			workersDone := make(chan struct{})
			go func() { wg.Wait(); close(workersDone) }()
			setterDone := make(chan int)
			go func() {
				r := rand.New(rand.NewPCG(7, 8))
				sets := 0
				for {
					select {
					case <-workersDone:
						setterDone <- sets
						return
					default:
					}
					floor.Store(src.set(s, tag, r))
					sets++
				}
			}()
			var sets int
			select {
			case sets = <-setterDone:
			case <-time.After(20 * time.Second):
				close(src.open)
				buf := make([]byte, 1<<20)
				t.Fatalf("deadlock: no progress 18s after the deadline\n%s", buf[:runtime.Stack(buf, true)])
			}
			close(src.open)
			if t.Failed() {
				return
			}
			var all []grant
			for _, g := range grants {
				all = append(all, g...)
			}
			slices.SortFunc(all, func(a, b grant) int { return int(a.first - b.first) })
			var directs int
			for i, g := range all {
				if i > 0 && g.first <= all[i-1].last {
					t.Fatalf("values repeated: %d..%d and %d..%d", all[i-1].first, all[i-1].last, g.first, g.last)
				}
				if g.last-g.first+1 == step*5 {
					directs++
				}
			}
			if got, want := s.Fence(tag), all[len(all)-1].last; got != want {
				t.Fatalf("Fence = %d, want the largest value handed out, %d", got, want)
			}
			if directs < 10 || sets < 10 {
				t.Fatalf("only %d direct allocations and %d SETs: the race was not exercised", directs, sets)
			}
			t.Logf("%d grants (%d direct), %d SETs", len(all), directs, sets)
		})
	}
}

// heldSource is a counter whose next Allocate, once armed, takes its range
// and then holds the answer until released: an allocation that was
// committed before what happens meanwhile, answered after it.
type heldSource struct {
	counterSource
	arm     atomic.Bool
	held    chan [2]int64
	release chan struct{}
}

func (h *heldSource) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	first, last, err := h.counterSource.Allocate(ctx, tag, n)
	if h.arm.CompareAndSwap(true, false) {
		h.held <- [2]int64{first, last}
		<-h.release
	}
	return first, last, err
}

// within runs f and fails the test if it has not returned after d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %v", what, d)
	}
}

func TestSegmentsDirectResultBelowFloorOrIssuedIsDropped(t *testing.T) {
	ctx := context.Background()
	src := &heldSource{held: make(chan [2]int64), release: make(chan struct{})}
	s := NewSegments(src, 10, time.Now)
	const tag = "t"
	type result struct{ first, last int64 }
	direct := func() (chan result, [2]int64) {
		src.arm.Store(true)
		out := make(chan result, 1)
		go func() {
			first, last, err := s.Next(ctx, tag, 50)
			if err != nil {
				t.Error(err)
			}
			out <- result{first, last}
		}()
		return out, <-src.held
	}

	// A SET lands while a direct allocation from before it is in flight.
	out, d := direct()
	src.mu.Lock()
	v := src.high[tag] + 5 // SET tag v, above the held range
	src.high[tag] = v
	src.mu.Unlock()
	within(t, 2*time.Second, "Fence during a direct allocation", func() { s.Fence(tag) })
	src.release <- struct{}{}
	r := <-out
	if r.first <= v {
		t.Fatalf("direct allocation %d..%d from before SET %d handed out after its Fence returned", r.first, r.last, v)
	}
	if d[0] > v || r.last-r.first != 49 {
		t.Fatalf("held %v, got %v", d, r)
	}

	// Values are handed out from the buffer while a direct allocation from
	// before them is in flight.
	out, d = direct()
	var one int64
	within(t, 2*time.Second, "Next(1) during a direct allocation", func() {
		var err error
		if one, _, err = s.Next(ctx, tag, 1); err != nil {
			t.Error(err)
		}
	})
	src.release <- struct{}{}
	r = <-out
	if one <= d[1] || r.first <= one {
		t.Fatalf("held %v, then %d from the buffer, then the direct call returned %v", d, one, r)
	}
	if got := s.Fence(tag); got != r.last {
		t.Fatalf("Fence = %d, want %d", got, r.last)
	}
	next, _, err := s.Next(ctx, tag, 1)
	if err != nil || next <= r.last {
		t.Fatalf("after the direct call ended at %d: %d, %v", r.last, next, err)
	}
}

func TestSegmentsFence(t *testing.T) {
	src := &heldSource{held: make(chan [2]int64), release: make(chan struct{})}
	s := NewSegments(src, 100, time.Now)
	ctx := context.Background()
	if got := s.Fence("t"); got != 0 {
		t.Fatalf("Fence of an unknown tag = %d", got)
	}
	steps := []struct {
		n    int64
		want int64
	}{{1, 1}, {5, 6}, {500, 600}, {1, 601}} // 500 > step: direct, above the buffered 7..100
	for _, st := range steps {
		if _, last, err := s.Next(ctx, "t", st.n); err != nil || last != st.want {
			t.Fatalf("Next(%d) ended at %d (%v), want %d", st.n, last, err, st.want)
		}
	}
	if got := s.Fence("t"); got != 601 {
		t.Fatalf("Fence = %d, want the largest value handed out, 601", got)
	}

	// What the source hands out after the Fence may lie below what was
	// buffered before it (a SET lowered the tag): it is served, from the
	// first value on.
	src.mu.Lock()
	src.high["t"] = 601
	src.mu.Unlock()
	if first, _, err := s.Next(ctx, "t", 1); err != nil || first != 602 {
		t.Fatalf("after the fence: %d, %v; want 602, a fresh segment", first, err)
	}

	// A direct allocation asked for before a Fence is dropped when it
	// arrives, and the source asked again.
	src.arm.Store(true)
	out := make(chan int64, 1)
	go func() {
		first, _, err := s.Next(ctx, "t", 500)
		if err != nil {
			t.Error(err)
		}
		out <- first
	}()
	held := <-src.held
	issued := s.Fence("t")
	src.release <- struct{}{}
	if got := <-out; got <= held[1] {
		t.Fatalf("the direct allocation %v asked for before Fence (issued %d) was handed out: got %d", held, issued, got)
	}

	// So is a refill.
	s.Fence("t")
	src.arm.Store(true)
	go func() {
		first, _, err := s.Next(ctx, "t", 1)
		if err != nil {
			t.Error(err)
		}
		out <- first
	}()
	held = <-src.held
	s.Fence("t")
	src.release <- struct{}{}
	if got := <-out; got <= held[1] {
		t.Fatalf("the refill %v asked for before Fence was handed out: got %d", held, got)
	}
}

// TestSegmentsNextRunTakesWhatTheSegmentHolds: NextRun hands out up to n
// values from the current segment, never waits for more than one, and
// leaves no gap: a run of runs takes exactly the values single Nexts would.
func TestSegmentsNextRunTakesWhatTheSegmentHolds(t *testing.T) {
	src := &counterSource{}
	s := NewSegments(src, 10, newFakeClock().Now)
	ctx := context.Background()
	want := int64(1)
	for i := range 200 {
		n := int64(1 + i%32)
		first, last, err := s.NextRun(ctx, "orders", n)
		if err != nil {
			t.Fatal(err)
		}
		if first != want || last < first || last-first+1 > n {
			t.Fatalf("run of %d: %d..%d, want %d.. with at most %d values", n, first, last, want, n)
		}
		want = last + 1
	}
	s.Stop(ErrNoLeader)
	if _, _, err := s.NextRun(ctx, "orders", 5); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("after Stop: %v", err)
	}
}

// TestSegmentsTriedTagsLeaveNothing: a tag whose allocation is refused
// (the quorum lost), or that a SET fenced on a node that never issued from
// it, leaves no buffer behind, however many such tags come; a tag that did
// get values keeps its buffer; concurrent callers on one tag share one.
func TestSegmentsTriedTagsLeaveNothing(t *testing.T) {
	src := &counterSource{down: true}
	s := NewSegments(src, 10, time.Now)
	s.wait = 10 * time.Millisecond
	ctx := context.Background()
	for i := range 1000 {
		tag := fmt.Sprintf("t%d", i)
		if _, _, err := s.NextRun(ctx, tag, 1); !errors.Is(err, ErrNoLeader) {
			t.Fatalf("INCR %s with the source down: %v", tag, err)
		}
		if _, _, err := s.Next(ctx, tag, 50); !errors.Is(err, ErrNoLeader) { // larger than a step: direct
			t.Fatalf("NEXTSEG %s 50 with the source down: %v", tag, err)
		}
		s.Fence("f" + tag)
	}
	if n := len(s.Status()); n != 0 {
		t.Fatalf("%d buffers left by tags that never got a value", n)
	}
	src.mu.Lock()
	src.down = false
	src.mu.Unlock()
	var wg sync.WaitGroup
	seen := make(chan int64, 800)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				v, _, err := s.NextRun(ctx, "orders", 1)
				if err != nil {
					t.Error(err)
					return
				}
				seen <- v
			}
		}()
	}
	wg.Wait()
	close(seen)
	got := map[int64]bool{}
	for v := range seen {
		if got[v] {
			t.Fatalf("%d issued twice", v)
		}
		got[v] = true
	}
	if st := s.Status(); len(st) != 1 || st[0].Tag != "orders" {
		t.Fatalf("buffers after issuing from one tag: %+v", st)
	}
	s.Fence("orders")
	if len(s.Status()) != 1 {
		t.Fatal("a fence dropped the buffer of a tag that issued values")
	}
}

// TestSweepIdleDropsOnlyIdleBuffers: a buffer that handed out nothing for
// two sweeps is dropped, one used between them is kept, one with an
// allocation in flight is kept until it lands. A tag without a buffer, or
// with one that has handed out nothing since it was made, vouches for
// nothing (Issued and Fence answer 0); a new buffer's first value is above
// every value the dropped one handed out.
func TestSweepIdleDropsOnlyIdleBuffers(t *testing.T) {
	src := &heldSource{held: make(chan [2]int64, 1), release: make(chan struct{})}
	s := NewSegments(src, 100, newFakeClock().Now)
	var released sync.Once
	release := func() { released.Do(func() { close(src.release) }) }
	defer s.Close()
	defer release()
	ctx := context.Background()
	var last int64
	for range 3 {
		_, l, err := s.Next(ctx, "idle", 1)
		if err != nil {
			t.Fatal(err)
		}
		last = l
	}
	if _, _, err := s.Next(ctx, "busy", 1); err != nil {
		t.Fatal(err)
	}
	waitRefills(t, s)
	if got := s.SweepIdle(); got != 0 {
		t.Fatalf("the first sweep dropped %d buffers, want 0", got)
	}
	if _, _, err := s.Next(ctx, "busy", 1); err != nil {
		t.Fatal(err)
	}
	if got := s.SweepIdle(); got != 1 || s.Issued("idle") != 0 || s.Issued("busy") == 0 {
		t.Fatalf("the second sweep dropped %d buffers, want 1 (idle); Issued: idle %d busy %d",
			got, s.Issued("idle"), s.Issued("busy"))
	}
	if got := s.Fence("idle"); got != 0 || s.Buffers() != 1 {
		t.Fatalf("Fence of a dropped tag: %d, %d buffers: want 0 and no buffer made", got, s.Buffers())
	}

	// A new buffer with its first segment in flight vouches for nothing,
	// and sweeps leave it until the segment lands (and drop the other).
	src.arm.Store(true)
	next := make(chan int64, 1)
	go func() {
		first, _, err := s.Next(ctx, "idle", 1)
		if err != nil {
			t.Error(err)
		}
		next <- first
	}()
	<-src.held
	for range 3 {
		s.SweepIdle()
	}
	if got := s.Issued("idle"); got != 0 || s.Buffers() != 1 {
		t.Fatalf("a buffer with its first segment in flight: Issued %d, %d buffers; want 0 and 1", got, s.Buffers())
	}
	release()
	if first := <-next; first <= last {
		t.Fatalf("a new buffer handed out %d, not above %d that the dropped one handed out", first, last)
	}
}

// waitRefills waits until no refill of s is in flight.
func waitRefills(t *testing.T, s *Segments) {
	t.Helper()
	within(t, 5*time.Second, "the refills", s.refills.Wait)
}

// batchSource is a counterSource that also allocates for several tags in
// one call, and counts those calls.
type batchSource struct {
	counterSource
	batches atomic.Int32
}

func (b *batchSource) AllocateEach(ctx context.Context, tags []string, n []int64) []Allocation {
	b.batches.Add(1)
	out := make([]Allocation, len(tags))
	for i, tag := range tags {
		out[i].First, out[i].Last, out[i].Err = b.counterSource.Allocate(ctx, tag, n[i])
	}
	return out
}

// TestPrefetchAllocatesNewTagsTogether: the first segments of many new tags
// come in one batch, and each tag's first value is served from it without
// another call to the source; a tag that already holds values is not asked
// for again.
func TestPrefetchAllocatesNewTagsTogether(t *testing.T) {
	src := &batchSource{}
	s := NewSegments(src, 100, newFakeClock().Now)
	defer s.Close()
	ctx := context.Background()
	if _, _, err := s.Next(ctx, "old", 1); err != nil {
		t.Fatal(err)
	}
	waitRefills(t, s)
	src.mu.Lock()
	before := src.calls
	src.mu.Unlock()
	tags := []string{"old"}
	for i := range 500 {
		tags = append(tags, fmt.Sprintf("new%d", i), fmt.Sprintf("new%d", i)) // each twice
	}
	s.Prefetch(tags)
	for _, tag := range tags[1:] {
		if !s.Buffered(tag) {
			t.Fatalf("%s has no buffer after Prefetch", tag)
		}
	}
	for i := range 500 {
		if _, _, err := s.NextRun(ctx, fmt.Sprintf("new%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	src.mu.Lock()
	calls := src.calls - before
	src.mu.Unlock()
	if got := src.batches.Load(); got != 1 || calls != 500 {
		t.Fatalf("500 new tags: %d batches, %d segments allocated; want 1 batch of 500", got, calls)
	}
}

// TestBuffersAreABoundedHotSet: a node whose clients make tag after tag
// (each by a single INCR) holds at most 1.25 x the bound of buffers, each
// further quarter of the bound starting a sweep, and a tag issued from
// between them keeps its buffer: its values follow one another.
func TestBuffersAreABoundedHotSet(t *testing.T) {
	s := NewSegments(&counterSource{}, 10, newFakeClock().Now)
	defer s.Close()
	s.maxBuffers = 64
	ctx := context.Background()
	most, want := 0, int64(1)
	for i := range 1000 {
		if _, _, err := s.Next(ctx, fmt.Sprintf("t:%d", i), 1); err != nil {
			t.Fatal(err)
		}
		first, _, err := s.Next(ctx, "hot", 1)
		if err != nil {
			t.Fatal(err)
		}
		if first != want {
			t.Fatalf("the hot tag handed out %d after %d new tags, want %d: its buffer was dropped", first, i+1, want)
		}
		want++
		waitRefills(t, s)
		within(t, 5*time.Second, "the sweep", s.sweeps.Wait)
		most = max(most, s.Buffers())
	}
	if most > 64*5/4+1 {
		t.Fatalf("%d buffers at most, want at most %d", most, 64*5/4+1)
	}
	if n, _ := s.Totals(); n < 16 {
		t.Fatalf("%d buffers left, want the recent ones kept", n)
	}
}

// stepSource records the largest segment asked for and how many were.
type stepSource struct {
	counterSource
	largest atomic.Int64
}

func (s *stepSource) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	if n > s.largest.Load() {
		s.largest.Store(n)
	}
	return s.counterSource.Allocate(ctx, tag, n)
}

// A tag drawn a thousand values a request, as fast as it goes, costs few
// refills: its step grows to MaxSegmentStep and no further.
func TestSegmentsStepGrowsToItsBoundForAFastTag(t *testing.T) {
	src := &stepSource{}
	s := NewSegments(src, 1000, newFakeClock().Now) // the clock stands: every segment lasts under 2s
	defer s.Close()
	const n, values = 1000, 1_000_000_000
	var last int64
	for range values / n {
		first, l, err := s.Next(context.Background(), "fast", n)
		if err != nil {
			t.Fatal(err)
		}
		if first <= last || l-first+1 != n {
			t.Fatalf("got %d..%d after %d", first, l, last)
		}
		last = l
	}
	waitRefills(t, s)
	if got := src.largest.Load(); got != MaxSegmentStep {
		t.Fatalf("largest segment asked for: %d, want the bound %d", got, MaxSegmentStep)
	}
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	// Doubling from 1000 to the bound takes 17 segments, then one per
	// 100,000,000 values: a tag drawn at 400M values/s (NEXTSEG 1000 at
	// P32) costs a few Raft entries a second, not hundreds.
	if want := 40; calls > want {
		t.Fatalf("%d refills for %d values of NEXTSEG %d, want at most %d", calls, values, n, want)
	}
}
