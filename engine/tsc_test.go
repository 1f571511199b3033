package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"idserver/internal/memstore"
)

// counterAt is a counter running at rate ticks per ns, started at base.
func counterAt(base int64, rate float64, m time.Duration) int64 {
	return base + int64(float64(m)*rate)
}

// TestCounterEndErrsEarly: the counter is not used before its rate is
// measured over tscSpan; once it is, the end of a reading converted into
// counter ticks comes at or before the reading's end, by the margin, for
// a counter at the rate measured (and so for any faster one).
func TestCounterEndErrsEarly(t *testing.T) {
	const base, rate = 1 << 40, 2.5
	tc := tscCheck{trusted: true}
	pair := func(m time.Duration) (int64, time.Duration, int64) {
		return counterAt(base, rate, m), m, counterAt(base, rate, m) + 100
	}
	for m := time.Millisecond; m < tscSpan; m += time.Millisecond {
		c1, m, c2 := pair(m)
		if end := tc.end(c1, m, c2, m+time.Millisecond); end != math.MinInt64 || tc.on.Load() {
			t.Fatalf("at %v, before the rate is measured: end %d, on %v", m, end, tc.on.Load())
		}
	}
	for m := tscSpan + time.Millisecond; m < 3*tscSpan; m += 997 * time.Microsecond {
		until := m + tscMargin + 1 + time.Duration(rand.Int64N(int64(time.Millisecond)))
		c1, m, c2 := pair(m)
		end := tc.end(c1, m, c2, until)
		if !tc.on.Load() || end == math.MinInt64 {
			t.Fatalf("at %v, after a span: not on (rate %v)", m, tc.rate)
		}
		// The monotonic time the counter shows at end, at the true rate.
		if at := time.Duration(float64(end-base) / rate); at > until-tscMargin {
			t.Fatalf("a reading ending at %v ends at counter time %v: late", until, at)
		}
	}
	if tc.rate > rate || tc.rate < 0.98*rate {
		t.Fatalf("rate in use %v for a counter at %v", tc.rate, rate)
	}
}

// TestCounterThatMisbehavesIsDropped: a counter that goes back, or runs
// slower than the rate in use, is never used again; a pair whose two
// counter reads lie far apart (a preemption between them) is not measured
// with.
func TestCounterThatMisbehavesIsDropped(t *testing.T) {
	const base, rate = 1 << 40, 3.0
	measured := func() *tscCheck {
		tc := &tscCheck{trusted: true}
		for _, m := range []time.Duration{time.Millisecond, time.Millisecond + tscSpan} {
			c := counterAt(base, rate, m)
			tc.end(c, m, c+10, m+time.Millisecond)
		}
		if !tc.on.Load() {
			t.Fatal("not on after a span")
		}
		return tc
	}
	dropped := func(tc *tscCheck, what string) {
		t.Helper()
		if tc.on.Load() || tc.trusted {
			t.Fatalf("%s: still used (on %v, trusted %v)", what, tc.on.Load(), tc.trusted)
		}
	}

	tc := measured()
	m := 2*tscSpan + time.Millisecond
	c := counterAt(base, rate, m)
	if end := tc.end(c, m, c+10, m+time.Millisecond); end == math.MinInt64 {
		t.Fatal("a good pair: no end")
	}
	back := c - 2*tscPairTicks
	if end := tc.end(back, m+time.Millisecond, back+10, m+2*time.Millisecond); end != math.MinInt64 {
		t.Fatal("a counter that went back: an end")
	}
	dropped(tc, "a counter that went back")

	tc = measured()
	m = 2*tscSpan + 2*time.Millisecond // a span on: the counter at 0.98 of the rate
	slow := counterAt(base, rate, tscSpan+time.Millisecond) + int64(float64(m-tscSpan-time.Millisecond)*rate*0.98)
	if end := tc.end(slow, m, slow+10, m+time.Millisecond); end != math.MinInt64 {
		t.Fatal("a slower counter: an end")
	}
	dropped(tc, "a counter slower than the rate in use")

	// A loose pair far off the rate is not measured with, so it drops nothing.
	tc = measured()
	m = 2*tscSpan + 2*time.Millisecond
	// As if m were read long after c1: the counter 0.9 of the rate on.
	c = counterAt(base, rate, tscSpan+time.Millisecond) + int64(float64(m-tscSpan-time.Millisecond)*rate*0.9)
	if tc.end(c, m, c+2*tscPairTicks, m+time.Millisecond); !tc.on.Load() {
		t.Fatal("a loose pair was measured with")
	}
}

// TestCounterNeverCarriesAReadingPastItsMillisecond: on the machine's
// clocks with the counter check on, no ID carries a millisecond that was
// over before it was asked for, over calls spread with pauses of up to 2
// ms (which a counter that misjudged a reading's end would carry a stale
// millisecond across), and by the end the counter is in use where the
// kernel's clock is the counter, and not used where it is not.
func TestCounterNeverCarriesAReadingPastItsMillisecond(t *testing.T) {
	g := counterGenerator(t)
	calls, late := issueInBursts(t, g, time.Now().Add(3*tscSpan), g.NextID)
	if c, want := g.Status().Counter, machineCounter(); c != want {
		t.Fatalf("after %d calls over %v the counter is %q, want %q (trusted %v, rate %v)", calls, 3*tscSpan, c, want, g.tsc.trusted, g.tsc.rate)
	}
	t.Logf("%d IDs, %d with a millisecond already over; counter rate in use %.4f ticks/ns", calls, late, g.tsc.rate)
}

// counterGenerator is a generator on the machine's clocks with the counter
// check on, as a node makes it, closed when the test ends. Where the
// kernel's clock is not the counter (machineCounter), it reads the
// monotonic clock on every call, and the tests check that path instead.
func counterGenerator(t *testing.T) *Generator {
	t.Helper()
	g, err := New(Config{Layout: DefaultLayout(), Worker: 1, LeaseEndMS: math.MaxInt64,
		Monotonic: MonotonicClock(), TSC: true}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// machineCounter is the clock a generator with the counter check on ends
// up reading on this machine, as INFO snowflake clock_counter names it:
// "tsc" where the kernel's clocksource is the counter (with constant_tsc
// and nonstop_tsc), "monotonic" elsewhere.
func machineCounter() string {
	if TSCTrusted() {
		return "tsc"
	}
	return "monotonic"
}

// issueInBursts calls next until stop (or 5 million IDs), in bursts of up
// to 2000 with pauses of up to 2 ms between them, across which a counter
// that misjudged a reading's end would carry a stale millisecond, and
// fails the test for every ID whose millisecond was over before it was
// asked for (the first ten named). Wall and monotonic clocks may disagree
// by what NTP slews them apart: 50 µs are allowed. It returns the IDs
// issued and how many of them were late; goroutines may share it.
func issueInBursts(t *testing.T, g *Generator, stop time.Time, next func() (int64, error)) (calls, late int) {
	epoch := DefaultEpoch.UnixNano()
	const slack = 50 * time.Microsecond
	for time.Now().Before(stop) && calls < 5_000_000 {
		for range rand.IntN(2000) {
			before := (time.Now().UnixNano() - epoch - int64(slack)) / int64(time.Millisecond)
			id, err := next()
			if err != nil {
				t.Error(err)
				return calls, late
			}
			calls++
			if ms := idMS(t, g, id); ms < before {
				late++
				if late <= 10 {
					t.Errorf("ID of ms %d asked for at ms %d", ms, before)
				}
			}
		}
		time.Sleep(time.Duration(rand.Int64N(int64(2 * time.Millisecond))))
	}
	return calls, late
}
