package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/memstore"
	"idserver/internal/testproc"
)

// expand returns the IDs of runs, checking that they increase with gaps
// between them (each run as long as it can be).
func expand(t *testing.T, runs []IDRun) []int64 {
	t.Helper()
	var ids []int64
	for i, r := range runs {
		if r.First > r.Last || (i > 0 && r.First <= runs[i-1].Last+1) {
			t.Fatalf("run %d %v after %v: runs must increase with gaps", i, r, runs[max(i-1, 0)])
		}
		for id := r.First; id <= r.Last; id++ {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestNextIDRunsIssuesWhatNextIDsIssues: two generators on two clocks that
// move alike are given the same random mix of calls, one answering NEXTID
// with NextIDs and the other with NextIDRuns; every call must answer the
// same IDs (or the same error) on both, through GENEIDs on random genes,
// batches past a millisecond's capacity (waits), clock steps back within
// and beyond the borrow, and a lease ending midway.
// expandStep expands runs whose IDs lie step apart, checking that each
// run is whole steps long and that the runs increase.
func expandStep(t *testing.T, runs []IDRun, step int64) []int64 {
	t.Helper()
	var ids []int64
	for i, r := range runs {
		if r.Last < r.First || (r.Last-r.First)%step != 0 || (i > 0 && r.First <= runs[i-1].Last) {
			t.Fatalf("run %d %v (step %d) after %v", i, r, step, runs[max(i-1, 0)])
		}
		for id := r.First; id <= r.Last; id += step {
			ids = append(ids, id)
		}
	}
	return ids
}

func TestNextIDRunsIssuesWhatNextIDsIssues(t *testing.T) {
	testproc.Long(t)
	layouts := []Layout{
		DefaultLayout(),
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 6, SeqBits: 16, GeneBits: 8},
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 0},
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 12},
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 0, SeqBits: 22, GeneBits: 3},
	}
	for _, l := range layouts {
		t.Run(l.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(l.SeqBits), uint64(l.GeneBits)))
			clocks := [2]*fakeClock{newFakeClock(), newFakeClock()}
			var sleeps [2]atomic.Int64
			var gens [2]*Generator
			leaseEnd := clocks[0].sinceEpochMS() + 2000
			for i := range gens {
				gens[i] = newGen(t, clocks[i], &memstore.HighWater{}, func(c *Config) {
					c.Layout, c.LeaseEndMS, c.Sleep = l, leaseEnd, clocks[i].sleeper(&sleeps[i])
					// A short borrow, so that batches past a
					// millisecond's capacity wait.
					c.MaxBorrow = time.Millisecond
					c.Worker = min(c.Worker, l.MaxWorker())
				})
			}
			maxCount := 3 << l.SeqBits // up to three milliseconds' worth
			var issued, errs, runs, geneRuns int
			var behind time.Duration // how far steps back have set the clocks back
			for op := range 3000 {
				var got [2][]int64
				var gotErr [2]error
				switch k := rng.IntN(20); {
				case k < 9:
					n := 1 + rng.IntN(min(maxCount, 20000))
					if rng.IntN(2) == 0 {
						n = 1 + rng.IntN(300)
					}
					got[0], gotErr[0] = gens[0].NextIDs(nil, n)
					var r []IDRun
					r, gotErr[1] = gens[1].NextIDRuns([]IDRun{{-5, -5}}, n)
					if r[0] != (IDRun{-5, -5}) {
						t.Fatalf("op %d: NextIDRuns changed what dst held: %v", op, r[0])
					}
					got[1] = expand(t, r[1:])
					runs += len(r) - 1
				case k < 15:
					// GeneIDRuns on the second generator issues what
					// GeneIDs issues on the first, as runs a gene step apart.
					gene, n := rng.Uint32(), 1+rng.IntN(100)
					if rng.IntN(4) == 0 {
						n = 1 + rng.IntN(min(maxCount, 10000))
					}
					got[0], gotErr[0] = gens[0].GeneIDs(nil, gene, n)
					var r []IDRun
					r, gotErr[1] = gens[1].GeneIDRuns(nil, gene, n)
					got[1] = expandStep(t, r, gens[1].GeneStep())
					geneRuns += len(r)
				case k < 18:
					// Forward, and half the time back to where a step
					// back left the clock.
					d := time.Duration(rng.IntN(3)) * time.Millisecond
					if rng.IntN(10) == 0 {
						d = time.Duration(rng.IntN(3000)) * time.Millisecond
					}
					if rng.IntN(2) == 0 {
						d, behind = d+behind, 0
					}
					for _, c := range clocks {
						c.Step(d)
					}
				case k < 19:
					d := time.Duration(rng.IntN(20)) * time.Millisecond
					behind += d
					for _, c := range clocks {
						c.Step(-d)
					}
				default:
					leaseEnd = clocks[0].sinceEpochMS() + int64(50+rng.IntN(1000))
					for _, g := range gens {
						g.SetLease(leaseEnd)
					}
				}
				if !slices.Equal(got[0], got[1]) || fmt.Sprint(gotErr[0]) != fmt.Sprint(gotErr[1]) {
					t.Fatalf("op %d: NextIDs gave %d IDs (%v), NextIDRuns %d (%v)\n%v\n%v",
						op, len(got[0]), gotErr[0], len(got[1]), gotErr[1], head(got[0]), head(got[1]))
				}
				issued += len(got[0])
				if gotErr[0] != nil {
					errs++
				}
			}
			if sleeps[0].Load() != sleeps[1].Load() || clocks[0].Now() != clocks[1].Now() {
				t.Fatalf("the two generators waited %d and %d times", sleeps[0].Load(), sleeps[1].Load())
			}
			// 22 sequence bits: 4M IDs per millisecond, not reached here.
			if errs == 0 || (sleeps[0].Load() == 0 && l.SeqBits <= 16) {
				t.Fatalf("the mix never hit an error (%d) or a wait (%d)", errs, sleeps[0].Load())
			}
			t.Logf("%d IDs alike, %d errors alike, %d waits; NextIDRuns answered %d runs, GeneIDRuns %d", issued, errs, sleeps[0].Load(), runs, geneRuns)
		})
	}
}

func head(ids []int64) []int64 { return ids[:min(len(ids), 8)] }

// TestNextIDRunsConcurrently: NextIDRuns, NextIDs and GeneIDs from several
// goroutines on the real clock never issue an ID twice, and one
// goroutine's NEXTID IDs (runs and lists) strictly increase.
func TestNextIDRunsConcurrently(t *testing.T) {
	testproc.Long(t)
	for _, l := range []Layout{DefaultLayout(), {Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 6, SeqBits: 16, GeneBits: 8}} {
		g, err := New(Config{Layout: l, Worker: 1, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		all := issuedSet{}
		var wg sync.WaitGroup
		errc := make(chan error, 4)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine, next []int64
				for i := range 300 {
					var ids []int64
					var err error
					switch (i + w) % 3 {
					case 0:
						var runs []IDRun
						runs, err = g.NextIDRuns(nil, 1+(i*37)%5000)
						for _, r := range runs {
							for id := r.First; id <= r.Last; id++ {
								ids = append(ids, id)
							}
						}
						next = append(next, ids...)
					case 1:
						ids, err = g.NextIDs(nil, 1+i%100)
						next = append(next, ids...)
					default:
						ids, err = g.GeneIDs(nil, uint32(i), 1+i%30)
					}
					if err != nil {
						errc <- err
						return
					}
					mine = append(mine, ids...)
				}
				for i := 1; i < len(next); i++ {
					if next[i] <= next[i-1] {
						errc <- fmt.Errorf("goroutine %d: NEXTID %d after %d", w, next[i], next[i-1])
						return
					}
				}
				mu.Lock()
				defer mu.Unlock()
				for _, id := range mine {
					if _, dup := all[id]; dup {
						errc <- fmt.Errorf("ID %d issued twice", id)
						return
					}
					all[id] = struct{}{}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		t.Logf("%v: %d IDs, none twice", l, len(all))
	}
}

// TestNextIDRunsAfterClose: a closed generator issues no run.
func TestNextIDRunsAfterClose(t *testing.T) {
	g := newGen(t, newFakeClock(), &memstore.HighWater{}, nil)
	if _, err := g.NextIDRuns(nil, 10); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if runs, err := g.NextIDRuns(nil, 10); !errors.Is(err, ErrClosed) || len(runs) != 0 {
		t.Fatalf("after Close: %v, %v", runs, err)
	}
}

func BenchmarkNextIDRuns(b *testing.B) {
	l := Layout{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 6, SeqBits: 16, GeneBits: 8}
	g, err := New(Config{Layout: l, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10000} {
		b.Run(fmt.Sprint("NextIDs/", n), func(b *testing.B) {
			buf := make([]int64, 0, n)
			for b.Loop() {
				if _, err := g.NextIDs(buf[:0], n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/ID")
		})
		b.Run(fmt.Sprint("NextIDRuns/", n), func(b *testing.B) {
			buf := make([]IDRun, 0, 16)
			for b.Loop() {
				if _, err := g.NextIDRuns(buf[:0], n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/ID")
		})
	}
}
