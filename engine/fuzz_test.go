package engine

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/memstore"
)

// FuzzDecode: any int64 either is refused as ErrInvalidID (not positive) or
// decodes into parts that rebuild it exactly, for any valid layout.
func FuzzDecode(f *testing.F) {
	for _, seed := range []int64{1, 253001380376084537, 1<<63 - 1, 0, -1, -1 << 63} {
		f.Add(seed, uint8(8))
	}
	f.Fuzz(func(t *testing.T, id int64, geneBits uint8) {
		l := DefaultLayout()
		l.GeneBits = int(geneBits) % (l.SeqBits + 1)
		p, err := l.Decode(id)
		if id <= 0 {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("Decode(%d) = %v, want ErrInvalidID", id, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(%d): %v", id, err)
		}
		rebuilt := (p.UnixMS-l.Epoch.UnixMilli())<<(l.WorkerBits+l.SeqBits) | p.Worker<<l.SeqBits | p.Sequence<<l.GeneBits | p.Gene
		if rebuilt != id || p.Worker > l.MaxWorker() || p.Gene >= 1<<l.GeneBits {
			t.Fatalf("Decode(%d) = %+v, rebuilt %d", id, p, rebuilt)
		}
	})
}

// FuzzGeneratorOps drives one worker's generator with a sequence of clock
// steps (forward and back), lease renewals, NEXTIDs, GENEIDs and restarts
// (clean or after a crash) read from the input. Whatever the sequence: no ID
// repeats, the IDs of one call strictly increase, none has a time at or past
// the lease end, and the only refusals are ErrNoLease and ErrClockBack.
func FuzzGeneratorOps(f *testing.F) {
	f.Add([]byte{2 | 200, 3, 3 | 255, 0 | 8, 4 | 31, 4 | 255, 1 | 40, 3, 5, 3})
	f.Add([]byte{3, 2 | 16, 3 | 255, 4 | 255, 4 | 255, 4 | 255, 4 | 255, 0 | 255, 3 | 128})
	f.Add([]byte{2 | 248, 1 | 248, 3, 5 | 8, 3, 0 | 248, 3 | 248, 2 | 8, 4 | 64})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 300 {
			ops = ops[:300]
		}
		clock := newFakeClock()
		var sleeps atomic.Int64
		store := &memstore.HighWater{}
		cfg := Config{Layout: DefaultLayout(), Worker: 1, Window: 100 * time.Millisecond, MaxBorrow: 10 * time.Millisecond, Sleep: clock.sleeper(&sleeps)}
		g, err := New(cfg, clock.Now, store)
		if err != nil {
			t.Fatal(err)
		}
		seen := issuedSet{}
		check := func(ids []int64, err error) {
			if err != nil && !errors.Is(err, ErrNoLease) && !errors.Is(err, ErrClockBack) {
				t.Fatalf("unexpected error %v", err)
			}
			lease := g.Status().LeaseEndMS
			for i, id := range ids {
				if i > 0 && id <= ids[i-1] {
					t.Fatalf("%d after %d in one call", id, ids[i-1])
				}
				if ms := idMS(t, g, id); ms >= lease {
					t.Fatalf("id time %d at or past the lease end %d", ms, lease)
				}
			}
			seen.add(t, ids...)
		}
		for _, op := range ops {
			arg := int64(op >> 3)
			switch op & 7 {
			case 0, 6:
				clock.Step(time.Duration(arg) * time.Millisecond)
				if err := g.ReserveAhead(); err != nil {
					t.Fatal(err)
				}
			case 1:
				clock.Step(-time.Duration(arg*37) * time.Millisecond)
			case 2:
				g.SetLease(clock.sinceEpochMS() + arg*5 - 40)
			case 3:
				check(g.NextIDs(nil, int(1+arg*arg)))
			case 4, 7:
				check(g.GeneIDs(nil, uint32(arg%4), int(1+arg/4)))
			case 5:
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
		}
	})
}
