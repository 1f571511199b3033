package engine

import (
	"errors"
	"sync"
	"testing"
	"time"

	"idserver/internal/memstore"
	"idserver/internal/testproc"
)

// A clock that went back further than the borrow: CLOCKBACK (kicking
// Trouble, naming what the node does about it), then, on a fresh worker
// ID, issuing at once from the wall clock with no ID repeated; the stored
// high-water comes down to the new worker's window, and the lease is the
// new worker's, not the old one's.
func TestSwitchWorkerAfterClockBack(t *testing.T) {
	clock := newFakeClock()
	store := &memstore.HighWater{}
	g := newGen(t, clock, store, func(c *Config) { c.LeaseEndMS = clock.sinceEpochMS() + 3*3600_000 + 10_000 })
	seen := issuedSet{}
	clock.Step(3 * time.Hour)
	before, err := g.NextIDs(nil, 5000)
	if err != nil {
		t.Fatal(err)
	}
	seen.add(t, before...)
	clock.Step(-3 * time.Hour)
	if st := g.Status(); st.ClockBehindMS < 3*3600_000-10 {
		t.Fatalf("status after the step back: %+v", st)
	}
	g.SetClockBackProblem("taking a fresh worker ID")
	_, err = g.NextID()
	var cb *ClockBackError
	if !errors.As(err, &cb) || cb.Reason != "taking a fresh worker ID" {
		t.Fatalf("after the step back: %v", err)
	}
	select {
	case <-g.Trouble():
	default:
		t.Fatal("CLOCKBACK did not kick Trouble")
	}
	wall := clock.sinceEpochMS()
	if err := g.SwitchWorker(9, wall-50, wall+10_000); err != nil {
		t.Fatal(err)
	}
	st := g.Status()
	if st.Worker != 9 || st.ClockBehindMS != 0 || st.LeaseEndMS != wall+10_000 || store.Value() > wall+4_000 {
		t.Fatalf("status after the switch: %+v, stored high-water %d (wall %d)", st, store.Value(), wall)
	}
	after, err := g.NextIDs(nil, 5000)
	if err != nil {
		t.Fatalf("on the fresh worker: %v", err)
	}
	seen.add(t, after...)
	for _, id := range after {
		p, _ := g.Layout().Decode(id)
		if p.Worker != 9 || p.UnixMS-g.Layout().Epoch.UnixMilli() < wall {
			t.Fatalf("id %d after the switch: %+v", id, p)
		}
	}
	if after[0] >= before[0] {
		t.Fatal("the fresh worker's IDs are not from the wall clock")
	}
	// The new worker's lease bounds it: 10 s on, refused.
	clock.Step(11 * time.Second)
	if _, err := g.NextID(); !errors.Is(err, ErrNoLease) {
		t.Fatalf("past the new worker's lease: %v", err)
	}
	// A start above the previous holder's lease end that lies ahead of the
	// clock: not counted as a clock fault.
	wall = clock.sinceEpochMS()
	if err := g.SwitchWorker(3, wall+2000, wall+20_000); err != nil {
		t.Fatal(err)
	}
	ids, err := g.NextIDs(nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := g.Layout().Decode(ids[0]); p.UnixMS-g.Layout().Epoch.UnixMilli() <= wall+2000 {
		t.Fatalf("not above the previous holder's lease: %+v", p)
	}
	if err := g.SwitchWorker(g.Layout().MaxWorker()+1, 0, wall+20_000); err == nil {
		t.Fatal("a worker ID out of range was taken")
	}
}

// A clock that goes back less than a second after the start is measured
// from the start (the boot floor): the node borrows past it first, and once
// that is used up and it answers CLOCKBACK, Status says the clock is behind
// by more than the borrow, so the node takes a fresh worker ID then.
func TestClockBehindRightAfterTheStart(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, nil)
	clock.Step(700 * time.Millisecond)
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
	clock.Step(-time.Hour)
	for i := 0; ; i++ {
		if _, err := g.NextIDs(nil, 4096); errors.Is(err, ErrClockBack) {
			break
		} else if err != nil || i > 1000 {
			t.Fatalf("after %d batches: %v", i, err)
		}
	}
	if st := g.Status(); st.ClockBehindMS <= 1000 {
		t.Fatalf("answering CLOCKBACK with ClockBehindMS %d", st.ClockBehindMS)
	}
}

// Switches while NEXTID, NEXTIDRUNS and GENEID run concurrently: every
// reply increases, no ID repeats, and each reply is of one worker.
func TestSwitchWorkerUnderLoad(t *testing.T) {
	testproc.Long(t)
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, nil)
	var mu sync.Mutex
	seen := issuedSet{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var runs []IDRun
			for {
				select {
				case <-stop:
					return
				default:
				}
				var ids []int64
				var err error
				switch w {
				case 0:
					ids, err = g.NextIDs(nil, 300)
				case 1:
					ids, err = g.GeneIDs(nil, 7, 20)
				case 2:
					runs, err = g.NextIDRuns(runs[:0], 700)
					for _, r := range runs {
						for id := r.First; id <= r.Last; id++ {
							ids = append(ids, id)
						}
					}
				}
				if err != nil {
					continue // CLOCKBACK between a step and its switch
				}
				worker := (ids[0] >> 12) & 1023
				for i, id := range ids {
					if i > 0 && id <= ids[i-1] || (id>>12)&1023 != worker {
						t.Errorf("reply %d: %d after %d", w, id, ids[max(i-1, 0)])
						return
					}
				}
				mu.Lock()
				for _, id := range ids {
					if _, dup := seen[id]; dup {
						t.Errorf("duplicate %d", id)
					}
					seen[id] = struct{}{}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range 40 {
		clock.Step(5 * time.Second)
		time.Sleep(2 * time.Millisecond)
		clock.Step(-5 * time.Second)
		time.Sleep(time.Millisecond)
		wall := clock.sinceEpochMS()
		// Worker IDs go round: each one's previous lease (here: the time
		// it last issued up to, 5 s ahead) lies below the next start.
		if err := g.SwitchWorker(int64(i%4), wall-1, 1<<40); err != nil {
			t.Fatal(err)
		}
		clock.Step(6 * time.Second)
	}
	close(stop)
	wg.Wait()
	if len(seen) == 0 {
		t.Fatal("nothing issued")
	}
	t.Logf("%d IDs over 40 worker switches", len(seen))
}
