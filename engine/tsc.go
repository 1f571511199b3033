package engine

import (
	"math"
	"sync/atomic"
	"time"
)

// The time-stamp counter check (engine/DESIGN.md, "The counter"). A reading
// of the clock is good until the monotonic clock reaches its end (until);
// where the kernel's clock is the CPU's time-stamp counter (TSCTrusted),
// the fast path compares the counter with that end converted to counter
// ticks instead of reading the monotonic clock: RDTSC costs a third of Go's
// monotonic read. The conversion errs early, never late: the counter is
// read before the monotonic clock, the rate used is 1% below the one
// measured, and a margin is kept, so that the counter says "over" at or
// before the monotonic clock would.
//
// The rate is measured between pairs of readings at least tscSpan apart,
// and measured again at each such span: a counter that ran slower than the
// rate used, or went back, is never trusted again by this generator (the
// fast path reads the monotonic clock, as without the check).
type tscCheck struct {
	trusted bool        // the counter is measured against the monotonic clock at each reading (g.mu)
	on      atomic.Bool // trusted and its rate measured: the fast path reads the counter
	rate    float64     // counter ticks per ns used for the conversion (1% below the measured one); 0: not measured yet
	c0      int64       // the pair the span being measured began with
	m0      time.Duration
	last    int64 // the latest counter value of a pair: the next must not lie further back than tscPairTicks
}

const (
	// tscSpan is the least time a rate is measured over: a pair is exact
	// to within tscPairTicks, so the rate to within 2*tscPairTicks over
	// the span (8e-5 at 2 GHz), far inside the 1% it is lowered by.
	tscSpan = 100 * time.Millisecond
	// tscPairTicks: a pair whose two counter reads, before and after the
	// monotonic one, are further apart (a preemption, an interrupt) is
	// not used to measure with.
	tscPairTicks = 8000
	// tscMargin is kept from a reading's end, for the counters of two CPUs
	// (which the kernel found in step at boot) differing by a little: up
	// to tscPairTicks back is taken as such, further back as a counter
	// that went back, and tscPairTicks is at most 8 µs on any counter of 1
	// GHz or more (3.3 µs here, at 2.4 GHz).
	tscMargin = 10 * time.Microsecond
)

// stamp is what the fast path compares with the reading's end: the counter
// (tsc) or the monotonic clock, read before g.mu is taken.
func (g *Generator) stamp() (now int64, tsc bool) {
	if g.tsc.on.Load() {
		return rdtsc(), true
	}
	return int64(g.monoNow()), false
}

// current reports whether the reading in force is still the clock's
// millisecond at now, a stamp taken before g.mu. g.mu is held.
func (f *fastPath) current(now int64, tsc bool) bool {
	if tsc {
		return now < f.untilTSC
	}
	return now < int64(f.until)
}

// expire makes the next call read the clock again. g.mu is held.
func (f *fastPath) expire() { f.until, f.untilTSC = math.MinInt64, math.MinInt64 }

// end converts until, the end of a reading, into counter ticks, from a
// pair taken now: the counter c1, the monotonic clock m, the counter c2,
// read in that order, while the counter is trusted. It returns
// math.MinInt64 until the rate is measured, and once the counter is no
// longer trusted. g.mu is held.
func (t *tscCheck) end(c1 int64, m time.Duration, c2 int64, until time.Duration) int64 {
	if c1 < t.last-tscPairTicks || c2 < c1 {
		t.distrust() // the counter went back
		return math.MinInt64
	}
	t.last = max(t.last, c2)
	if c2-c1 <= tscPairTicks {
		switch {
		case t.c0 == 0:
			t.c0, t.m0 = c1, m
		case m-t.m0 >= tscSpan:
			measured := float64(c1-t.c0) / float64(m-t.m0)
			if t.rate == 0 {
				t.rate = measured * 0.99
				t.on.Store(true)
			} else if measured < t.rate {
				t.distrust() // slower than the rate in use: its conversions were late
				return math.MinInt64
			}
			t.c0, t.m0 = c1, m
		}
	}
	if t.rate == 0 || until-m <= tscMargin {
		return math.MinInt64
	}
	return c1 + int64(float64(until-m-tscMargin)*t.rate)
}

// distrust stops using the counter for good. g.mu is held.
func (t *tscCheck) distrust() {
	t.trusted = false
	t.on.Store(false)
}
