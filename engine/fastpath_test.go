package engine

import (
	"errors"
	"math"
	"testing"
	"time"

	"idserver/internal/memstore"
)

// The fast path (NextID within one reading of the clock, and every slot of
// issueGen below the limit) checks one precomputed limit (fastPath) instead
// of the lease, the borrow, the window and closed. These tests issue on a
// fake monotonic clock that stands still, so that every call after the
// first one takes the fast path, and check that each of those rules still
// holds when slots run past it inside one reading.

// fastGen is a generator on a fake wall clock and a fake monotonic clock,
// 0.3 ms into a millisecond two seconds after its start (past the floor the
// start puts on the logical clock), with one ID issued to take the reading.
func fastGen(t *testing.T, store *memstore.HighWater, mod func(*Config)) (*Generator, *fakeClock, *fakeMono) {
	t.Helper()
	clock, mono := newFakeClock(), &fakeMono{}
	cfg := Config{Layout: DefaultLayout(), Worker: 1, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64, Monotonic: mono.now,
		Sleep: func(time.Duration) { t.Fatal("the generator waited") }}
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg, clock.Now, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	clock.Step(2*time.Second + 300*time.Microsecond)
	mono.step(2*time.Second + 300*time.Microsecond)
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
	return g, clock, mono
}

// nextUntilError issues NextIDs until one fails (at most max), calling
// check on each ID, and returns the count and the error.
func nextUntilError(t *testing.T, g *Generator, max int, check func(id int64)) (int, error) {
	t.Helper()
	for i := range max {
		id, err := g.NextID()
		if err != nil {
			return i, err
		}
		check(id)
	}
	return max, nil
}

// TestFastPathStopsAtTheLease: borrowing ahead inside one reading, NextID
// stops at the lease end (no ID whose millisecond reaches it), and goes on
// once the lease moves up (SetLease, outside the lock), to the new end.
func TestFastPathStopsAtTheLease(t *testing.T) {
	// fastGen's clock is 2000 ms past newFakeClock's: the lease ends 3 ms
	// past the first ID's.
	g, clock, _ := fastGen(t, &memstore.HighWater{}, func(c *Config) { c.LeaseEndMS = newFakeClock().sinceEpochMS() + 2000 + 3 })
	lease := clock.sinceEpochMS() + 3
	check := func(id int64) {
		if ms := idMS(t, g, id); ms >= lease {
			t.Fatalf("ID of ms %d with the lease ending at %d", ms, lease)
		}
	}
	n, err := nextUntilError(t, g, 10*4096, check)
	if !errors.Is(err, ErrNoLease) {
		t.Fatalf("after %d IDs: %v, want ErrNoLease", n, err)
	}
	if n != 3*4096-1 { // the first ID, by fastGen, and the rest of 3 ms
		t.Fatalf("%d IDs before the lease end, want %d", n, 3*4096-1)
	}
	lease += 2
	g.SetLease(lease)
	n, err = nextUntilError(t, g, 10*4096, check)
	if !errors.Is(err, ErrNoLease) || n != 2*4096 {
		t.Fatalf("after the lease moved 2 ms: %d IDs, then %v; want %d, then ErrNoLease", n, err, 2*4096)
	}
}

// TestFastPathStaysBelowTheHighWater: with no background step (Run) and a
// small window, borrowing ahead inside one reading runs past the mark
// reserved at the start; every ID's millisecond is below the durable
// high-water when the ID is out.
func TestFastPathStaysBelowTheHighWater(t *testing.T) {
	store := &memstore.HighWater{}
	g, _, _ := fastGen(t, store, func(c *Config) { c.Window = 64 * time.Millisecond })
	writes := store.Writes()
	n, err := nextUntilError(t, g, 200*4096, func(id int64) {
		hw := store.Value()
		if ms := idMS(t, g, id); ms >= hw {
			t.Fatalf("ID of ms %d out with the high-water at %d", ms, hw)
		}
	})
	if err != nil {
		t.Fatalf("after %d IDs: %v", n, err)
	}
	if store.Writes() == writes {
		t.Fatal("200 ms ahead with a window of 64 ms and no high-water written")
	}
}

// TestFastPathBorrowsNoFurther: inside one reading, NextID runs at most the
// borrow ahead of the clock; then it waits for the clock.
func TestFastPathBorrowsNoFurther(t *testing.T) {
	const borrow = 5
	var g *Generator
	var clock *fakeClock
	var mono *fakeMono
	waits := 0
	g, clock, mono = fastGen(t, &memstore.HighWater{}, func(c *Config) {
		c.MaxBorrow = borrow * time.Millisecond
		c.Sleep = func(d time.Duration) { waits++; clock.Step(d); mono.step(d) }
	})
	n, err := nextUntilError(t, g, 20*4096, func(id int64) {
		if ms, wall := idMS(t, g, id), clock.sinceEpochMS(); ms > wall+borrow {
			t.Fatalf("ID of ms %d at ms %d, with a borrow of %d ms", ms, wall, borrow)
		}
	})
	if err != nil {
		t.Fatalf("after %d IDs: %v", n, err)
	}
	if waits == 0 {
		t.Fatalf("20 ms of IDs in one reading with a borrow of %d ms and no wait", borrow)
	}
}

// TestFastPathStopsAtClose: inside one reading, NextID after Close is
// ErrClosed (an ID then would be above the high-water Close lowered).
func TestFastPathStopsAtClose(t *testing.T) {
	g, _, _ := fastGen(t, &memstore.HighWater{}, nil)
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if id, err := g.NextID(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NextID after Close: %d, %v; want ErrClosed", id, err)
	}
}

// TestFastPathFollowsASwitchOfWorker: inside one reading, the IDs after
// SwitchWorker carry the new worker and stop at its lease end, which lies
// below the old one.
func TestFastPathFollowsASwitchOfWorker(t *testing.T) {
	g, clock, _ := fastGen(t, &memstore.HighWater{}, nil)
	if _, err := g.NextIDs(nil, 100); err != nil {
		t.Fatal(err)
	}
	wall := clock.sinceEpochMS()
	lease := wall + 3
	if err := g.SwitchWorker(9, wall, lease); err != nil {
		t.Fatal(err)
	}
	n, err := nextUntilError(t, g, 10*4096, func(id int64) {
		p, err := g.Layout().Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		if ms := p.UnixMS - g.Layout().Epoch.UnixMilli(); p.Worker != 9 || ms <= wall || ms >= lease {
			t.Fatalf("ID of worker %d, ms %d after a switch to worker 9 above ms %d with the lease ending at %d", p.Worker, ms, wall, lease)
		}
	})
	// The genes go on in turn from where they were: the first of the
	// lease's two milliseconds is short by the 101 IDs before.
	if !errors.Is(err, ErrNoLease) || n != 2*4096-101 {
		t.Fatalf("after the switch: %d IDs, then %v; want %d, then ErrNoLease", n, err, 2*4096-101)
	}
}
