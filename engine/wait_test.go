package engine

import (
	"testing"
	"time"

	"idserver/internal/memstore"
)

// TestExhaustionWaitsOnlyForTheNextMillisecond: when a millisecond's
// sequence is used up past the borrow, the wait lasts until the clock
// reaches the next millisecond, not a whole millisecond from a reading
// taken inside one.
func TestExhaustionWaitsOnlyForTheNextMillisecond(t *testing.T) {
	clock := newFakeClock()
	clock.Step(300 * time.Microsecond) // 0.3 ms into a millisecond
	var slept []time.Duration
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) {
		c.MaxBorrow = 0
		c.Sleep = func(d time.Duration) { slept = append(slept, d); clock.Step(d) }
	})
	ids, err := g.NextIDs(nil, 4096+1) // the millisecond's 4096, then one in the next
	if err != nil {
		t.Fatal(err)
	}
	if len(slept) != 1 || slept[0] != 700*time.Microsecond {
		t.Fatalf("waited %v, want once for 700µs", slept)
	}
	l := g.Layout()
	first, _ := l.Decode(ids[0])
	last, _ := l.Decode(ids[len(ids)-1])
	if last.UnixMS != first.UnixMS+1 {
		t.Fatalf("the 4097th ID is %d ms after the first, want 1", last.UnixMS-first.UnixMS)
	}
}
