package engine

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/memstore"
)

// fakeMono is a settable monotonic clock for Config.Monotonic.
type fakeMono struct{ d atomic.Int64 }

func (m *fakeMono) now() time.Duration   { return time.Duration(m.d.Load()) }
func (m *fakeMono) step(d time.Duration) { m.d.Add(int64(d)) }
func countingClock(c *fakeClock, n *atomic.Int64) Clock {
	return func() time.Time { n.Add(1); return c.Now() }
}

// TestMonotonicReadsTheWallClockOncePerMillisecond: with a monotonic clock,
// the generator reads the wall clock once per millisecond, and a step of
// the wall clock, back or forward, shows once the monotonic clock has left
// the millisecond of the last reading: not before, and not later.
func TestMonotonicReadsTheWallClockOncePerMillisecond(t *testing.T) {
	clock := newFakeClock()
	clock.Step(300 * time.Microsecond) // 0.3 ms into a millisecond: 0.7 ms of it left
	var reads, sleeps atomic.Int64
	mono := &fakeMono{}
	g, err := New(Config{Layout: DefaultLayout(), Worker: 1, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64,
		Monotonic: mono.now, Sleep: clock.sleeper(&sleeps)}, countingClock(clock, &reads), &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	// Two seconds on, past what the start's floor covers.
	clock.Step(2 * time.Second)
	mono.step(2 * time.Second)
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
	startMS := clock.sinceEpochMS()
	before := reads.Load()
	for range 100 {
		if _, err := g.NextID(); err != nil {
			t.Fatal(err)
		}
		mono.step(time.Microsecond)
		clock.Step(time.Microsecond)
	}
	if n := reads.Load() - before; n > 1 {
		t.Fatalf("%d wall clock reads for 100 IDs inside one millisecond, want at most 1", n)
	}

	// A step back beyond the borrow, 0.6 ms into the 0.7 left.
	clock.Step(-5 * time.Second)
	mono.step(500 * time.Microsecond)
	id, err := g.NextID()
	if err != nil {
		t.Fatalf("the step back showed inside the millisecond of the last reading: %v", err)
	}
	if ms := idMS(t, g, id); ms != startMS {
		t.Fatalf("ID of ms %d inside the millisecond %d", ms, startMS)
	}
	mono.step(100 * time.Microsecond) // the millisecond is over
	if _, err := g.NextID(); !errors.Is(err, ErrClockBack) {
		t.Fatalf("a step back of 5 s, the millisecond after: %v, want CLOCKBACK", err)
	}

	// Back again, and a step forward: the IDs take the new millisecond
	// once the monotonic clock leaves the one read.
	clock.Step(5*time.Second + time.Hour)
	mono.step(time.Millisecond)
	id, err = g.NextID()
	if err != nil {
		t.Fatal(err)
	}
	if ms := idMS(t, g, id); ms != clock.sinceEpochMS() {
		t.Fatalf("ID of ms %d after a step forward, want %d", ms, clock.sinceEpochMS())
	}
	if sleeps.Load() != 0 {
		t.Fatalf("waited %d times", sleeps.Load())
	}
}

// TestMonotonicNeverCarriesAReadingPastItsMillisecond: a wall clock that
// stands still 0.999 ms into a millisecond is read again as soon as the
// monotonic clock says that millisecond is over, however long the
// generator went without a call.
func TestMonotonicNeverCarriesAReadingPastItsMillisecond(t *testing.T) {
	clock := newFakeClock()
	clock.Step(999 * time.Microsecond)
	var reads, sleeps atomic.Int64
	mono := &fakeMono{}
	g, err := New(Config{Layout: DefaultLayout(), Worker: 1, LeaseEndMS: math.MaxInt64,
		Monotonic: mono.now, Sleep: clock.sleeper(&sleeps)}, countingClock(clock, &reads), &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
	before := reads.Load()
	mono.step(time.Microsecond) // the end of the millisecond
	clock.Step(time.Microsecond)
	id, err := g.NextID()
	if err != nil {
		t.Fatal(err)
	}
	if reads.Load() != before+1 || idMS(t, g, id) != clock.sinceEpochMS() {
		t.Fatalf("at the end of a millisecond: %d reads, ID of ms %d, want one read and ms %d",
			reads.Load()-before, idMS(t, g, id), clock.sinceEpochMS())
	}
}

// TestSaturationOnTheMachinesClocks: the layout's ceiling on the machine's
// clocks, with the precise wait (Generator.wait) and no borrowing: IDs strictly
// increase in each goroutine and never repeat, no millisecond carries more
// than 4096, and no ID's time is ahead of the wall clock once it is out.
func TestSaturationOnTheMachinesClocks(t *testing.T) {
	g, err := New(Config{Layout: DefaultLayout(), Worker: 1, MaxBorrow: 0, LeaseEndMS: math.MaxInt64,
		Monotonic: MonotonicClock()}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	const each = 4096 * 10
	var (
		mu    sync.Mutex
		perMS = map[int64]int{}
		seen  = map[int64]bool{}
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int64, 0, each)
			var last int64
			for range each {
				id, err := g.NextID()
				if err != nil {
					t.Error(err)
					return
				}
				if wall := time.Now().UnixMilli() - DefaultEpoch.UnixMilli(); idMS(t, g, id) > wall {
					t.Errorf("ID of ms %d out at ms %d, with no borrowing", idMS(t, g, id), wall)
					return
				}
				if id <= last {
					t.Errorf("%d after %d", id, last)
					return
				}
				last = id
				ids = append(ids, id)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if seen[id] {
					t.Errorf("duplicate %d", id)
					return
				}
				seen[id] = true
				perMS[idMS(t, g, id)]++
			}
		}()
	}
	wg.Wait()
	for ms, n := range perMS {
		if n > 4096 {
			t.Fatalf("%d IDs in ms %d", n, ms)
		}
	}
	t.Logf("%d IDs in %v (the ceiling: %v)", len(seen), time.Since(start), time.Duration(len(seen))*time.Millisecond/4096)
}

// TestMonotonicStepBackWhileSaturated: a step back that the generator has
// not seen yet (inside the millisecond of its last reading) while the
// millisecond's sequence is used up is a wait until that millisecond ends,
// then CLOCKBACK: never a wait as long as the step.
func TestMonotonicStepBackWhileSaturated(t *testing.T) {
	clock := newFakeClock()
	mono := &fakeMono{}
	var slept time.Duration
	g, err := New(Config{Layout: DefaultLayout(), Worker: 1, MaxBorrow: 0, LeaseEndMS: math.MaxInt64, Monotonic: mono.now,
		Sleep: func(d time.Duration) { slept += d; clock.Step(d); mono.step(d) }}, clock.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	clock.Step(2*time.Second + 300*time.Microsecond) // past the start's floor, 0.3 ms into a millisecond
	mono.step(2*time.Second + 300*time.Microsecond)
	if _, err := g.NextIDs(nil, 4096); err != nil { // the millisecond's sequence
		t.Fatal(err)
	}
	clock.Step(-time.Hour)
	if _, err := g.NextID(); !errors.Is(err, ErrClockBack) {
		t.Fatalf("after a step back of 1 h with the millisecond used up: %v, want CLOCKBACK", err)
	}
	if slept > time.Millisecond {
		t.Fatalf("waited %v for a clock that went back an hour", slept)
	}
}
