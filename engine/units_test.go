package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/memstore"
)

// randomLayout is a valid layout of 40..63 bits in one of the units whose
// time bits last at least three years past the fake clock's start (400
// days after the default epoch).
func randomLayout(r *rand.Rand) Layout {
	for {
		l := Layout{Epoch: DefaultEpoch, IDBits: MinIDBits + r.IntN(MaxIDBits-MinIDBits+1), Unit: Units[r.IntN(len(Units))]}
		least := 1
		for time.Duration(1<<least)*l.Unit < 4*365*24*time.Hour {
			least++
		}
		l.TimeBits = least + r.IntN(6)
		rest := l.IDBits - l.TimeBits
		if rest < 1 {
			continue
		}
		l.SeqBits = 1 + r.IntN(min(rest, 22))
		l.WorkerBits = rest - l.SeqBits
		l.GeneBits = r.IntN(min(l.SeqBits, 10) + 1)
		if l.Validate() == nil {
			return l
		}
	}
}

// TestRandomWalkOverLayoutsAndUnits: for random layouts (widths, 40..63
// bits, each unit), a random walk of clock steps forward and back, lease
// renewals, NEXTID, NEXTIDRUNS, GENEID, GENEIDRUNS, UUIDV7 and restarts (clean or
// crashed) issues no duplicate and no ID at or above 2^id-bits; every ID
// decodes into parts that rebuild it, in a whole time unit; NEXTIDs keep
// increasing across the whole walk, restarts included, and so do each
// gene's GENEIDs and the UUIDv7s; no ID's time unit ends past the lease.
func TestRandomWalkOverLayoutsAndUnits(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	layouts := 150
	if testing.Short() {
		layouts = 30
	}
	silent := 0 // walks that issued nothing (leases and clocks against them)
	for i := range layouts {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		l := randomLayout(r)
		t.Run(fmt.Sprintf("%d/%s", i, l), func(t *testing.T) {
			t.Logf("seed %d, layout %d", seed, i)
			if walkLayout(t, r, l) == 0 {
				silent++
			}
		})
	}
	if silent > layouts/5 {
		t.Fatalf("%d of %d walks issued nothing (seed %d)", silent, layouts, seed)
	}
}

// walkLayout walks one layout and returns how many IDs it issued.
func walkLayout(t *testing.T, r *rand.Rand, l Layout) int {
	u := l.Unit
	unitMS := l.UnitMS()
	clock := newFakeClock()
	var sleeps atomic.Int64
	store := &memstore.HighWater{}
	cfg := Config{Layout: l, Worker: r.Int64N(l.MaxWorker() + 1), Window: max(100*time.Millisecond, 3*u),
		MaxBorrow: time.Duration(r.IntN(3)) * u, LeaseEndMS: clock.sinceEpochMS() + 20*unitMS, Sleep: clock.sleeper(&sleeps)}
	g, err := New(cfg, clock.Now, store)
	if err != nil {
		t.Fatal(err)
	}
	seen := issuedSet{}
	var lastNext int64
	lastGene := map[int64]int64{}
	var lastUUID [16]byte
	shift := l.WorkerBits + l.SeqBits
	check := func(ids []int64, err error, gene int64) {
		t.Helper()
		if err != nil && !errors.Is(err, ErrNoLease) && !errors.Is(err, ErrClockBack) {
			t.Fatalf("unexpected error %v", err)
		}
		lease := g.Status().LeaseEndMS
		for _, id := range ids {
			if id <= 0 || (l.IDBits < 63 && id >= 1<<l.IDBits) {
				t.Fatalf("id %d outside (0, 2^%d)", id, l.IDBits)
			}
			p, err := l.Decode(id)
			if err != nil {
				t.Fatalf("Decode(%d): %v", id, err)
			}
			sinceEpoch := p.UnixMS - l.Epoch.UnixMilli()
			if sinceEpoch%unitMS != 0 {
				t.Fatalf("id %d decodes to %d ms, not a whole %v", id, sinceEpoch, u)
			}
			if rebuilt := sinceEpoch/unitMS<<shift | p.Worker<<l.SeqBits | p.Sequence<<l.GeneBits | p.Gene; rebuilt != id {
				t.Fatalf("id %d rebuilt as %d from %+v", id, rebuilt, p)
			}
			if p.Worker != cfg.Worker {
				t.Fatalf("id %d has worker %d, want %d", id, p.Worker, cfg.Worker)
			}
			if end := sinceEpoch + unitMS; end > lease {
				t.Fatalf("id %d's time unit ends at %d ms, past the lease end %d", id, end, lease)
			}
			if gene < 0 {
				if id <= lastNext {
					t.Fatalf("NEXTID %d after %d", id, lastNext)
				}
				lastNext = id
			} else {
				if p.Gene != gene {
					t.Fatalf("GENEID %d has gene %d, want %d", id, p.Gene, gene)
				}
				if id <= lastGene[gene] {
					t.Fatalf("GENEID %d of gene %d after %d", id, gene, lastGene[gene])
				}
				lastGene[gene] = id
			}
		}
		seen.add(t, ids...)
	}
	for range 200 {
		arg := int64(r.IntN(32))
		switch r.IntN(10) {
		case 0, 9:
			clock.Step(time.Duration(arg) * u)
			if err := g.ReserveAhead(); err != nil {
				t.Fatal(err)
			}
		case 1:
			clock.Step(-time.Duration(arg) * u / 2)
		case 2:
			g.SetLease(clock.sinceEpochMS() + (arg-2)*unitMS)
		case 3:
			ids, err := g.NextIDs(nil, int(1+arg*arg))
			check(ids, err, -1)
		case 4:
			runs, err := g.NextIDRuns(nil, int(1+arg*arg))
			check(expand(t, runs), err, -1)
		case 5, 6:
			gene := arg & (1<<l.GeneBits - 1)
			if arg%2 == 0 {
				runs, err := g.GeneIDRuns(nil, uint32(gene), int(1+arg*arg))
				check(expandStep(t, runs, g.GeneStep()), err, gene)
				break
			}
			ids, err := g.GeneIDs(nil, uint32(gene), int(1+arg/2))
			check(ids, err, gene)
		case 7:
			uuids, err := g.UUIDv7s(nil, int(1+arg))
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range uuids {
				if bytes.Compare(id[:], lastUUID[:]) <= 0 {
					t.Fatalf("UUID %s after %s", FormatUUID(id), FormatUUID(lastUUID))
				}
				lastUUID = id
			}
		case 8:
			if arg%2 == 0 {
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}
			}
			cfg.LeaseEndMS = g.Status().LeaseEndMS // the lease outlives the process
			if g, err = New(cfg, clock.Now, store); err != nil {
				t.Fatal(err)
			}
		}
		if hw := store.Value(); hw%unitMS != 0 {
			t.Fatalf("stored high-water %d ms is not a whole %v", hw, u)
		}
	}
	return len(seen)
}

// TestTheRulesHoldPerTimeUnit: what holds per millisecond holds per unit.
// IDs of one node increase; a unit's sequence used up moves to the next
// unit without a wait while --max-borrow allows (a borrow of 1s in units of
// 1s is one unit), then waits; a clock back within the borrow issues on,
// beyond it answers CLOCKBACK naming the distance in ms; and a restart
// after the clock went back starts above everything issued.
func TestTheRulesHoldPerTimeUnit(t *testing.T) {
	for _, u := range Units {
		t.Run(u.String(), func(t *testing.T) {
			l, err := AutoLayout(53, u)
			if err != nil {
				t.Fatal(err)
			}
			l.SeqBits, l.WorkerBits, l.GeneBits = 4, l.WorkerBits+l.SeqBits-4, 2 // 16 IDs per unit
			perUnit := 1 << l.SeqBits
			clock := newFakeClock()
			var slept time.Duration
			store := &memstore.HighWater{}
			cfg := Config{Layout: l, Worker: 3, Window: max(3*time.Second, 3*u), MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64,
				Sleep: func(d time.Duration) { slept += d; clock.Step(d) }}
			g, err := New(cfg, clock.Now, store)
			if err != nil {
				t.Fatal(err)
			}
			borrow := int(time.Second / u) // units of borrow
			unitOf := func(id int64) int64 {
				p, err := l.Decode(id)
				if err != nil {
					t.Fatal(err)
				}
				return (p.UnixMS - l.Epoch.UnixMilli()) / l.UnitMS()
			}
			wallUnit := clock.sinceEpochMS() / l.UnitMS()

			// The wall unit and the borrowed ones fill with no wait.
			ids, err := g.NextIDs(nil, (1+borrow)*perUnit)
			if err != nil || slept != 0 {
				t.Fatalf("within the borrow: %v, slept %v", err, slept)
			}
			for i, id := range ids {
				if i > 0 && id <= ids[i-1] {
					t.Fatalf("id %d after %d", id, ids[i-1])
				}
				if want := wallUnit + int64(i/perUnit); unitOf(id) != want {
					t.Fatalf("id #%d in unit %d, want %d: exhaustion moves to the next unit", i, unitOf(id), want)
				}
			}
			// One unit more than the borrow: a wait of one unit, then on.
			more, err := g.NextIDs(nil, perUnit)
			if err != nil {
				t.Fatal(err)
			}
			if slept != u {
				t.Fatalf("waited %v past the borrow, want one unit (%v)", slept, u)
			}
			if more[0] <= ids[len(ids)-1] {
				t.Fatal("not increasing after the wait")
			}
			// Once the clock is past them, a step back by the borrow: IDs
			// go on, above the last.
			clock.Step(2 * time.Second)
			if _, err := g.NextID(); err != nil {
				t.Fatal(err)
			}
			clock.Step(-time.Second)
			last, err := g.NextID()
			if err != nil || last <= more[len(more)-1] {
				t.Fatalf("clock back by the borrow: %d, %v (before %d)", last, err, more[len(more)-1])
			}
			// Beyond it: CLOCKBACK, in ms.
			clock.Step(-10 * time.Second)
			_, err = g.NextID()
			var cb *ClockBackError
			if !errors.As(err, &cb) || cb.BehindMS < 11_000-u.Milliseconds() || cb.BehindMS > 11_000+u.Milliseconds() {
				t.Fatalf("clock back 10s more: %v, want CLOCKBACK of about 11000 ms", err)
			}
			// A crash and a restart on the clock that went back: above
			// everything issued, strictly.
			g2, err := New(cfg, clock.Now, store)
			if err != nil {
				t.Fatal(err)
			}
			clock.Step(15 * time.Second)
			id, err := g2.NextID()
			if err != nil || id <= last {
				t.Fatalf("after the restart: %d, %v (last %d)", id, err, last)
			}
		})
	}
}

func TestAutoLayout(t *testing.T) {
	cases := []struct {
		bits int
		unit time.Duration
		want string
	}{
		{63, time.Millisecond, DefaultLayout().String()},
		{53, 10 * time.Millisecond, "epoch=2025-01-01T00:00:00Z id-bits=53 time-unit=10ms time-bits=38 worker-bits=5 seq-bits=10 gene-bits=6"},
		{53, time.Second, "epoch=2025-01-01T00:00:00Z id-bits=53 time-unit=1s time-bits=31 worker-bits=7 seq-bits=15 gene-bits=8"},
		{53, time.Millisecond, "epoch=2025-01-01T00:00:00Z id-bits=53 time-unit=1ms time-bits=41 worker-bits=4 seq-bits=8 gene-bits=4"},
		{63, time.Second, "epoch=2025-01-01T00:00:00Z id-bits=63 time-unit=1s time-bits=31 worker-bits=10 seq-bits=22 gene-bits=8"},
		{40, time.Second, "epoch=2025-01-01T00:00:00Z id-bits=40 time-unit=1s time-bits=31 worker-bits=3 seq-bits=6 gene-bits=2"},
	}
	for _, tc := range cases {
		l, err := AutoLayout(tc.bits, tc.unit)
		if err != nil || l.String() != tc.want {
			t.Errorf("AutoLayout(%d, %v) = %s, %v; want %s", tc.bits, tc.unit, l, err, tc.want)
		}
	}
	if _, err := AutoLayout(42, time.Millisecond); err == nil {
		t.Error("AutoLayout(42, 1ms) leaves 1 bit beside the time bits, and was not refused")
	}
	l, _ := AutoLayout(53, 10*time.Millisecond)
	if end := l.End(); end.Year() != 2112 {
		t.Errorf("53 bits of 10 ms end at %v, want in 2112", end)
	}
}
