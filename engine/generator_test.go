package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/memstore"
	"idserver/internal/testproc"
)

// fakeClock is a settable wall clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: DefaultEpoch.Add(400 * 24 * time.Hour)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sleeper returns a Sleep for Config that moves the clock to at least d
// after the moment it is called, like time.Sleep: callers sleeping at the
// same time move it once, not once each. It counts the calls.
func (c *fakeClock) sleeper(calls *atomic.Int64) func(time.Duration) {
	return func(d time.Duration) {
		calls.Add(1)
		target := c.Now().Add(d)
		c.mu.Lock()
		if target.After(c.t) {
			c.t = target
		}
		c.mu.Unlock()
		runtime.Gosched()
	}
}

// sinceEpochMS is the clock in ms since the default epoch.
func (c *fakeClock) sinceEpochMS() int64 { return c.Now().UnixMilli() - DefaultEpoch.UnixMilli() }

func newGen(t *testing.T, clock *fakeClock, store *memstore.HighWater, mod func(*Config)) *Generator {
	t.Helper()
	cfg := Config{Layout: DefaultLayout(), Worker: 5, Window: 3 * time.Second, MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg, clock.Now, store)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// issuedSet checks that IDs never repeat across calls.
type issuedSet map[int64]struct{}

func (s issuedSet) add(t *testing.T, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		if _, dup := s[id]; dup {
			t.Fatalf("duplicate id %d", id)
		}
		s[id] = struct{}{}
	}
}

func TestLayoutRoundTripThroughDecode(t *testing.T) {
	layouts := []Layout{
		DefaultLayout(),
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 0},
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 12},
		{Epoch: time.Date(2020, 6, 1, 0, 0, 0, 0, time.UTC), TimeBits: 42, WorkerBits: 5, SeqBits: 16, GeneBits: 4},
		{Epoch: DefaultEpoch, TimeBits: 39, WorkerBits: 0, SeqBits: 24 - 2, GeneBits: 10},
	}
	for _, l := range layouts {
		if l.TimeBits+l.WorkerBits+l.SeqBits != 63 {
			l.WorkerBits = 63 - l.TimeBits - l.SeqBits
		}
		t.Run(l.String(), func(t *testing.T) {
			clock := newFakeClock()
			worker := l.MaxWorker()
			g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) { c.Layout = l; c.Worker = worker })
			wantMS := clock.Now().UnixMilli()
			ids, err := g.NextIDs(nil, 3000)
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				p, err := l.Decode(id)
				if err != nil {
					t.Fatal(err)
				}
				if p.Worker != worker {
					t.Fatalf("worker %d, want %d", p.Worker, worker)
				}
				if p.UnixMS < wantMS || p.UnixMS > wantMS+int64(len(ids)) {
					t.Fatalf("time %d outside [%d, %d]", p.UnixMS, wantMS, wantMS+int64(len(ids)))
				}
				if !p.Time.Equal(time.UnixMilli(p.UnixMS)) {
					t.Fatalf("Time %v does not match UnixMS %d", p.Time, p.UnixMS)
				}
				rebuilt := (p.UnixMS-l.Epoch.UnixMilli())<<(l.WorkerBits+l.SeqBits) | p.Worker<<l.SeqBits | p.Sequence<<l.GeneBits | p.Gene
				if rebuilt != id {
					t.Fatalf("id %d (#%d) rebuilt as %d from %+v", id, i, rebuilt, p)
				}
			}
		})
	}
}

func TestDecodeRejectsImpossibleIDs(t *testing.T) {
	for _, id := range []int64{0, -1, -1 << 63} {
		if _, err := DefaultLayout().Decode(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Decode(%d) = %v, want ErrInvalidID", id, err)
		}
	}
}

func TestLayoutValidate(t *testing.T) {
	bad := []Layout{
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SeqBits: 11, GeneBits: 8},  // sum 62
		{Epoch: DefaultEpoch, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 13}, // gene > seq
		{Epoch: DefaultEpoch, TimeBits: 20, WorkerBits: 31, SeqBits: 12, GeneBits: 8},  // too little time
		{TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 8},                       // no epoch
	}
	for _, l := range bad {
		if l.Validate() == nil {
			t.Errorf("%s validated", l)
		}
	}
	if err := DefaultLayout().Validate(); err != nil {
		t.Error(err)
	}
}

func TestGeneOf(t *testing.T) {
	l := DefaultLayout()
	cases := map[string]uint32{
		"0":                   0,
		"7":                   7,
		"256":                 0,
		"1000001":             1000001 % 256,
		"9223372036854775807": uint32(uint64(9223372036854775807) % 256),
	}
	for in, want := range cases {
		if got, str := l.Gene([]byte(in)), l.GeneOfString(in); got != want || str != want {
			t.Errorf("Gene(%q) = %d, GeneOfString %d, want %d", in, got, str, want)
		}
	}
	// Not canonical integers: hashed with crc32.
	for _, in := range []string{"007", "-5", "+5", "9223372036854775808", "18446744073709551617", "abc", "1 ", ""} {
		want := crc32ieee(in) % 256
		if got := l.Gene([]byte(in)); got != want {
			t.Errorf("Gene(%q) = %d, want crc32 %d", in, got, want)
		}
		if got := l.GeneOfString(in); got != want {
			t.Errorf("GeneOfString(%q) = %d, want crc32 %d", in, got, want)
		}
	}
}

// crc32ieee is a bitwise CRC-32 (IEEE), written out so the test does not
// check the code against itself.
func crc32ieee(s string) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(s); i++ {
		crc ^= uint32(s[i])
		for range 8 {
			if crc&1 == 1 {
				crc = crc>>1 ^ 0xEDB88320
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

func TestGeneIDPropertyEveryPowerOfTwo(t *testing.T) {
	for _, geneBits := range []int{0, 1, 4, 8, 12} {
		l := DefaultLayout()
		l.GeneBits = geneBits
		g := newGen(t, newFakeClock(), &memstore.HighWater{}, func(c *Config) { c.Layout = l })
		seen := issuedSet{}
		r := rand.New(rand.NewPCG(1, 2))
		for range 2000 {
			buyer := r.Int64N(1 << 40)
			var key []byte
			if r.IntN(2) == 0 {
				key = []byte{byte(r.IntN(256)), byte(r.IntN(256)), 'x'}
			} else {
				key = []byte(itoa(buyer))
			}
			gene := l.Gene(key)
			ids, err := g.GeneIDs(nil, gene, 1+r.IntN(3))
			if err != nil {
				t.Fatal(err)
			}
			seen.add(t, ids...)
			for _, id := range ids {
				for s := int64(1); s <= 1<<geneBits; s <<= 1 {
					if id%s != int64(gene)%s {
						t.Fatalf("gene-bits %d: id %d %% %d = %d, gene %d %% %d = %d", geneBits, id, s, id%s, gene, s, int64(gene)%s)
					}
				}
				if r.IntN(2) == 0 && key[len(key)-1] != 'x' {
					if id%(1<<geneBits) != buyer%(1<<geneBits) {
						t.Fatalf("order %d does not route with buyer %d", id, buyer)
					}
				}
			}
		}
	}
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestNextIDSpreadsOverGenesAtLowRate(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, nil)
	counts := make([]int, 16)
	for range 16 * 50 {
		clock.Step(time.Hour) // one request an hour: every ID in a new millisecond
		if err := g.ReserveAhead(); err != nil {
			t.Fatal(err)
		}
		id, err := g.NextID()
		if err != nil {
			t.Fatal(err)
		}
		counts[id%16]++
	}
	for shard, n := range counts {
		if n != 50 {
			t.Fatalf("shard %d got %d of 800 IDs, want exactly 50: %v", shard, n, counts)
		}
	}
}

func TestNextIDStrictlyIncreasesAndFillsTheMillisecond(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, nil)
	ids, err := g.NextIDs(nil, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("id %d <= previous %d", ids[i], ids[i-1])
		}
	}
	// A frozen clock: 10000 IDs need ceil(10000/4096) = 3 milliseconds,
	// borrowed ahead of the wall clock.
	l := g.Layout()
	first, _ := l.Decode(ids[0])
	last, _ := l.Decode(ids[len(ids)-1])
	if span := last.UnixMS - first.UnixMS; span != 2 {
		t.Fatalf("10000 IDs spread over %d ms, want 3 (4096 per ms)", span+1)
	}
}

func TestSequenceExhaustionBorrowsThenWaits(t *testing.T) {
	clock := newFakeClock()
	var slept time.Duration
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) {
		c.MaxBorrow = 10 * time.Millisecond
		c.Sleep = func(d time.Duration) { slept += d; clock.Step(d) }
	})
	// 11 ms of sequence: the wall ms and 10 borrowed ones, with no wait.
	ids, err := g.NextIDs(nil, 11*4096)
	if err != nil || slept != 0 {
		t.Fatalf("within max-borrow: %v, slept %v", err, slept)
	}
	// Beyond the borrow, with the clock not behind: wait for it, then issue.
	more, err := g.NextIDs(nil, 3*4096)
	if err != nil {
		t.Fatalf("past max-borrow: %v", err)
	}
	if slept != 3*time.Millisecond {
		t.Fatalf("waited %v for 3 ms of sequence, want 3ms", slept)
	}
	if more[0] <= ids[len(ids)-1] {
		t.Fatal("not increasing after the wait")
	}
	// A clock that went back is CLOCKBACK, not a wait.
	clock.Step(-20 * time.Millisecond)
	_, err = g.NextIDs(nil, 4096)
	var cb *ClockBackError
	if !errors.As(err, &cb) || slept != 3*time.Millisecond {
		t.Fatalf("clock behind past max-borrow: got %v (slept %v), want CLOCKBACK", err, slept)
	}
}

func TestMixedNextAndGeneKeepTheirOrders(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) { c.MaxBorrow = time.Hour })
	r := rand.New(rand.NewPCG(3, 4))
	seen := issuedSet{}
	var lastNext int64
	lastGene := map[uint32]int64{}
	earlier := int64(0) // largest ID issued in earlier logical milliseconds
	var thisMS int64
	for i := range 200000 {
		if r.IntN(500) == 0 {
			clock.Step(time.Duration(1+r.IntN(2)) * time.Millisecond)
			earlier = max(earlier, thisMS)
		}
		if i%2 == 0 {
			id, err := g.NextID()
			if err != nil {
				t.Fatal(err)
			}
			if id <= lastNext {
				t.Fatalf("NEXTID %d after %d", id, lastNext)
			}
			lastNext = id
			seen.add(t, id)
			thisMS = max(thisMS, id)
			if id <= earlier {
				t.Fatalf("id %d not above %d from an earlier logical ms", id, earlier)
			}
		} else {
			gene := uint32(r.IntN(256))
			ids, err := g.GeneIDs(nil, gene, 1)
			if err != nil {
				t.Fatal(err)
			}
			if ids[0] <= lastGene[gene] {
				t.Fatalf("gene %d: %d after %d", gene, ids[0], lastGene[gene])
			}
			lastGene[gene] = ids[0]
			seen.add(t, ids[0])
			thisMS = max(thisMS, ids[0])
			if ids[0] <= earlier {
				t.Fatalf("id %d not above %d from an earlier logical ms", ids[0], earlier)
			}
		}
	}
}

func TestGeneBurstOverRandomGenesFillsTheMillisecond(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, nil)
	r := rand.New(rand.NewPCG(5, 6))
	// 100 ms worth at 4096 per ms. Each gene has 16 slots a millisecond and
	// random genes load them unevenly, so genes run ahead on their own lanes
	// instead of dragging the whole node to the next millisecond.
	const n = 409600
	lo, hi := int64(1<<62), int64(0)
	for range n {
		ids, err := g.GeneIDs(nil, uint32(r.IntN(256)), 1)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := g.Layout().Decode(ids[0])
		lo, hi = min(lo, p.UnixMS), max(hi, p.UnixMS)
	}
	perMS := float64(n) / float64(hi-lo+1)
	t.Logf("random-gene burst: %.0f IDs per ms (ceiling 4096)", perMS)
	if perMS < 0.9*4096 {
		t.Fatalf("random-gene burst reached %.0f IDs per ms, want close to 4096", perMS)
	}
}

func TestClockStepsBack(t *testing.T) {
	testproc.Long(t)
	for _, step := range []time.Duration{time.Millisecond, 500 * time.Millisecond, 5 * time.Second, time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			clock := newFakeClock()
			g := newGen(t, clock, &memstore.HighWater{}, nil)
			seen := issuedSet{}
			var last int64
			issue := func() error {
				id, err := g.NextID()
				if err == nil {
					seen.add(t, id)
					if id <= last {
						t.Fatalf("id %d after %d", id, last)
					}
					last = id
				}
				return err
			}
			for range 5000 {
				clock.Step(time.Millisecond / 4)
				if err := issue(); err != nil {
					t.Fatal(err)
				}
			}
			clock.Step(-step)
			clockbacks, issued := 0, 0
			for elapsed := time.Duration(0); elapsed < step+2*time.Second; elapsed += time.Millisecond {
				clock.Step(time.Millisecond)
				if err := g.ReserveAhead(); err != nil {
					t.Fatal(err)
				}
				err := issue()
				switch {
				case err == nil:
					issued++
				case errors.Is(err, ErrClockBack):
					clockbacks++
				default:
					t.Fatal(err)
				}
			}
			if step <= time.Second && clockbacks > 0 {
				t.Fatalf("step back %v within max-borrow gave %d CLOCKBACKs", step, clockbacks)
			}
			if step > time.Second && clockbacks == 0 {
				t.Fatalf("step back %v beyond max-borrow gave no CLOCKBACK", step)
			}
			if issued < 1000 {
				t.Fatalf("only %d IDs issued after the clock caught up", issued)
			}
		})
	}
}

func TestRestartStartsAboveStoredHighWater(t *testing.T) {
	for _, step := range []time.Duration{0, 500 * time.Millisecond, 5 * time.Second, time.Hour} {
		t.Run("back "+step.String(), func(t *testing.T) {
			clock := newFakeClock()
			store := &memstore.HighWater{}
			g := newGen(t, clock, store, nil)
			var last int64
			for range 3000 {
				clock.Step(time.Millisecond)
				if err := g.ReserveAhead(); err != nil {
					t.Fatal(err)
				}
				id, err := g.NextID()
				if err != nil {
					t.Fatal(err)
				}
				last = id
			}
			// Crash: no Close, the store keeps the reserved window.
			clock.Step(-step)
			g2 := newGen(t, clock, store, nil)
			id, err := g2.NextID()
			if step <= time.Second {
				// The reserved window is ours, not a clock fault: serve at once.
				if err != nil {
					t.Fatalf("restart after a %v step back: %v", step, err)
				}
			} else {
				if !errors.Is(err, ErrClockBack) {
					t.Fatalf("restart after a %v step back: got %v, want CLOCKBACK", step, err)
				}
				for errors.Is(err, ErrClockBack) {
					clock.Step(10 * time.Millisecond)
					id, err = g2.NextID()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if id <= last {
				t.Fatalf("after restart id %d <= %d issued before", id, last)
			}
		})
	}
}

func TestCleanCloseLowersHighWater(t *testing.T) {
	clock := newFakeClock()
	store := &memstore.HighWater{}
	g := newGen(t, clock, store, nil)
	id, err := g.NextID()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.NextID(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	p, _ := g.Layout().Decode(id)
	if want := p.UnixMS - DefaultEpoch.UnixMilli() + 1; store.Value() != want {
		t.Fatalf("high-water after Close = %d, want %d", store.Value(), want)
	}
	g2 := newGen(t, clock, store, nil)
	id2, err := g2.NextID()
	if err != nil || id2 <= id {
		t.Fatalf("after a clean restart: %d, %v (before: %d)", id2, err, id)
	}
}

func TestWindowReservedAheadAndRarely(t *testing.T) {
	clock := newFakeClock()
	store := &memstore.HighWater{}
	g := newGen(t, clock, store, nil)
	writes0 := store.Writes()
	for range 60000 { // one minute, one ID per ms
		clock.Step(time.Millisecond)
		if err := g.ReserveAhead(); err != nil {
			t.Fatal(err)
		}
		id, err := g.NextID()
		if err != nil {
			t.Fatal(err)
		}
		p, _ := g.Layout().Decode(id)
		if ms := p.UnixMS - DefaultEpoch.UnixMilli(); ms >= store.Value() {
			t.Fatalf("id time %d not below the stored high-water %d", ms, store.Value())
		}
	}
	// Extended by a window whenever half a window is left: about 40 writes.
	if w := store.Writes() - writes0; w < 20 || w > 60 {
		t.Fatalf("%d high-water writes in a minute, want about 40", w)
	}
}

func TestHotPathReservesWhenBackgroundIsLate(t *testing.T) {
	clock := newFakeClock()
	store := &memstore.HighWater{}
	g := newGen(t, clock, store, nil)
	clock.Step(10 * time.Second) // past the window, no background step ran
	id, err := g.NextID()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := g.Layout().Decode(id)
	if ms := p.UnixMS - DefaultEpoch.UnixMilli(); ms >= store.Value() {
		t.Fatalf("id time %d not below the stored high-water %d", ms, store.Value())
	}
	store.FailWith(errors.New("disk full"))
	clock.Step(10 * time.Second)
	if _, err := g.NextID(); !errors.Is(err, ErrHighWater) {
		t.Fatalf("store failure: got %v, want ErrHighWater", err)
	}
}

func TestConcurrentIssuersNeverRepeat(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) { c.MaxBorrow = time.Hour })
	var wg sync.WaitGroup
	results := make([][]int64, 8)
	for w := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				var ids []int64
				var err error
				if i%3 == 0 {
					ids, err = g.GeneIDs(nil, uint32(i%7), 3)
				} else {
					ids, err = g.NextIDs(nil, 1+i%5)
				}
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], ids...)
				if i%100 == 0 {
					clock.Step(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	seen := issuedSet{}
	for _, ids := range results {
		seen.add(t, ids...)
	}
}

func BenchmarkNextID(b *testing.B) {
	g, err := New(Config{Layout: DefaultLayout(), MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]int64, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.NextIDs(buf[:0], 1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCrashLoopDoesNotRunAway: restarts in quick succession, each after a
// crash that keeps the reserved window, must neither repeat an ID nor push
// the logical clock further ahead of the wall clock with every restart.
func TestCrashLoopDoesNotRunAway(t *testing.T) {
	clock := newFakeClock()
	store := &memstore.HighWater{}
	seen := issuedSet{}
	var last int64
	for restart := range 100 {
		g := newGen(t, clock, store, nil)
		for range 50 {
			clock.Step(time.Millisecond)
			ids, err := g.NextIDs(nil, 10)
			if err != nil {
				t.Fatalf("restart %d: %v", restart, err)
			}
			seen.add(t, ids...)
			if ids[0] <= last {
				t.Fatalf("restart %d: %d not above %d", restart, ids[0], last)
			}
			last = ids[len(ids)-1]
		}
		clock.Step(100 * time.Millisecond) // the crash and the new process
		st := g.Status()
		wall := clock.Now().UnixMilli() - DefaultEpoch.UnixMilli()
		if ahead := st.LastTimeMS - wall; ahead > 3000 {
			t.Fatalf("restart %d: logical clock %d ms ahead of the wall clock", restart, ahead)
		}
	}
}

func TestStartAboveForgottenHolder(t *testing.T) {
	clock := newFakeClock()
	wall := clock.Now().UnixMilli() - DefaultEpoch.UnixMilli()
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) { c.StartAboveMS = wall + 500 })
	id, err := g.NextID()
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := g.Layout().Decode(id); p.UnixMS-DefaultEpoch.UnixMilli() <= wall+500 {
		t.Fatalf("started at %d, not above %d", p.UnixMS-DefaultEpoch.UnixMilli(), wall+500)
	}
}

// idMS is the time of an ID in ms since the default epoch.
func idMS(t *testing.T, g *Generator, id int64) int64 {
	t.Helper()
	p, err := g.Layout().Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	return p.UnixMS - g.Layout().Epoch.UnixMilli()
}

func TestLeaseBoundsIssuedTimes(t *testing.T) {
	clock := newFakeClock()
	var slept atomic.Int64
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) {
		c.LeaseEndMS = 0
		c.Sleep = clock.sleeper(&slept)
	})
	// No lease yet: nothing is issued, and the error says so.
	_, err := g.NextID()
	var le *LeaseError
	if !errors.As(err, &le) || !errors.Is(err, ErrNoLease) || le.EndMS != 0 || err.Error() != "no worker lease yet" {
		t.Fatalf("before any lease: %v", err)
	}
	g.SetLeaseProblem("no quorum: 2 of 3 members unreachable")
	if _, err := g.GeneIDs(nil, 7, 1); err == nil || err.Error() != "no worker lease yet: no quorum: 2 of 3 members unreachable" {
		t.Fatalf("before any lease, with a reason: %v", err)
	}

	wall := clock.sinceEpochMS()
	g.SetLease(wall + 100)
	g.SetLease(wall + 50) // never lowers
	if st := g.Status(); st.LeaseEndMS != wall+100 {
		t.Fatalf("Status.LeaseEndMS = %d, want %d", st.LeaseEndMS, wall+100)
	}
	seen := issuedSet{}
	var last int64
	for range 99 {
		ids, err := g.NextIDs(nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		seen.add(t, ids...)
		for _, id := range ids {
			if ms := idMS(t, g, id); ms >= wall+100 {
				t.Fatalf("id time %d not below the lease end %d", ms, wall+100)
			}
		}
		last = ids[len(ids)-1]
		clock.Step(time.Millisecond)
	}
	// The clock passes the lease end: refused, without waiting for a lease.
	clock.Step(35 * time.Millisecond)
	_, err = g.NextIDs(nil, 5)
	if !errors.As(err, &le) || le.EndMS != wall+100 || le.BehindMS != 34 || slept.Load() != 0 {
		t.Fatalf("after the lease end: %v (%+v), slept %d times", err, le, slept.Load())
	}
	want := "worker lease ended 34 ms ago: no quorum: 2 of 3 members unreachable"
	if err.Error() != want {
		t.Fatalf("error text %q, want %q", err, want)
	}
	g.SetLeaseProblem("")
	if _, err := g.NextID(); err == nil || err.Error() != "the clock moved 34 ms past the worker lease (stepped forward?): renewing the lease" {
		t.Fatalf("with the reason cleared: %v", err)
	}
	// Renewed: issuing resumes above everything issued before.
	g.SetLease(clock.sinceEpochMS() + 10_000)
	ids, err := g.NextIDs(nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	seen.add(t, ids...)
	if ids[0] <= last {
		t.Fatalf("after renewal %d <= %d issued before", ids[0], last)
	}
}

// TestLeaseEndMidCallIsAGap: a call whose IDs would run past the lease end
// fails whole; the slots it took are never handed out later.
func TestLeaseEndMidCallIsAGap(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) { c.LeaseEndMS = 0 })
	wall := clock.sinceEpochMS()
	g.SetLease(wall + 2) // two milliseconds: 8192 slots
	first, err := g.NextIDs(nil, 5000)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]int64, 0, 8192)
	got, err := g.NextIDs(dst, 5000) // 3192 fit below the lease end
	if !errors.Is(err, ErrNoLease) || len(got) != 0 {
		t.Fatalf("a call crossing the lease end: %d IDs, %v", len(got), err)
	}
	if _, err := g.GeneIDs(nil, 3, 1000); !errors.Is(err, ErrNoLease) {
		t.Fatalf("GENEID past the lease end: %v", err)
	}
	g.SetLease(wall + 1000)
	after, err := g.NextIDs(nil, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if after[0] <= first[len(first)-1] || idMS(t, g, after[0]) < wall+2 {
		t.Fatalf("after the refused call, %d (ms %d) does not lie above the dropped slots", after[0], idMS(t, g, after[0]))
	}
}

func TestSetLeaseConcurrentOnlyRaises(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) { c.LeaseEndMS = 0 })
	var wg sync.WaitGroup
	var top atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range 5000 {
				v := r.Int64N(1 << 40)
				g.SetLease(v)
				for {
					cur := top.Load()
					if v <= cur || top.CompareAndSwap(cur, v) {
						break
					}
				}
				if _, err := g.NextID(); err != nil && !errors.Is(err, ErrNoLease) {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := g.Status().LeaseEndMS; got != top.Load() {
		t.Fatalf("lease end %d, want the largest set %d", got, top.Load())
	}
}

// TestSaturationWaitsInsteadOfClockBack: more demand than 2^seq-bits IDs per
// ms from concurrent callers waits for the clock, however long; only a clock
// that really went back is CLOCKBACK.
func TestSaturationWaitsInsteadOfClockBack(t *testing.T) {
	testproc.Long(t)
	cases := []struct {
		name      string
		callers   int
		calls     int
		gene      int64 // -1: NEXTID
		maxBorrow time.Duration
	}{
		{"4 x GENEID 42 10000", 4, 1, 42, time.Second}, // 625 ms of one gene's slots each
		{"4 x GENEID 42 10000, borrow 0", 4, 1, 42, 0},
		{"8 x 60 x NEXTID 10000", 8, 60, -1, time.Second}, // 4.8M IDs: 1172 ms of slots
		{"8 x 10 x NEXTID 10000, borrow 5ms", 8, 10, -1, 5 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			var sleeps atomic.Int64
			g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) {
				c.MaxBorrow = tc.maxBorrow
				c.Sleep = clock.sleeper(&sleeps)
			})
			start := clock.Now()
			results := make([][]int64, tc.callers)
			var wg sync.WaitGroup
			for w := range tc.callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range tc.calls {
						var ids []int64
						var err error
						if tc.gene < 0 {
							ids, err = g.NextIDs(make([]int64, 0, 10000), 10000)
						} else {
							ids, err = g.GeneIDs(make([]int64, 0, 10000), uint32(tc.gene), 10000)
						}
						if err != nil {
							t.Errorf("caller %d: %v", w, err)
							return
						}
						for i := 1; i < len(ids); i++ {
							if ids[i] <= ids[i-1] {
								t.Errorf("caller %d: %d after %d in one call", w, ids[i], ids[i-1])
								return
							}
						}
						results[w] = append(results[w], ids...)
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			all := slices.Concat(results...)
			slices.Sort(all)
			for i := 1; i < len(all); i++ {
				if all[i] == all[i-1] {
					t.Fatalf("duplicate id %d", all[i])
				}
			}
			if sleeps.Load() == 0 {
				t.Fatal("never waited for the clock: the test did not saturate")
			}
			t.Logf("%d IDs, %d waits, %v of clock", len(all), sleeps.Load(), clock.Now().Sub(start))
			// A real step back beyond the borrow is still CLOCKBACK, at once.
			clock.Step(-tc.maxBorrow - 5*time.Second)
			before := sleeps.Load()
			if _, err := g.NextID(); !errors.Is(err, ErrClockBack) || sleeps.Load() != before {
				t.Fatalf("clock back %v: %v (waited %d times)", tc.maxBorrow+5*time.Second, err, sleeps.Load()-before)
			}
		})
	}
}

// TestSaturationOnTheRealClock: the issue's case on time.Now and time.Sleep.
func TestSaturationOnTheRealClock(t *testing.T) {
	g, err := New(Config{Layout: DefaultLayout(), MaxBorrow: time.Second, LeaseEndMS: math.MaxInt64}, time.Now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.GeneIDs(nil, 42, 10000); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// TestStartAboveAheadOfTheClock: a reused worker ID starts above the previous
// holder's lease end, up to a lease ahead of the clock, and issues at once.
func TestStartAboveAheadOfTheClock(t *testing.T) {
	clock := newFakeClock()
	var sleeps atomic.Int64
	wall := clock.sinceEpochMS()
	above := wall + 10_000
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) {
		c.StartAboveMS = above
		c.LeaseEndMS = above + 10_000
		c.Sleep = clock.sleeper(&sleeps)
	})
	var last int64
	for i := range 2000 {
		ids, err := g.NextIDs(nil, 100)
		if err != nil {
			t.Fatalf("request %d, %d ms after a start %d ms ahead: %v", i, clock.sinceEpochMS()-wall, above-wall, err)
		}
		if ms := idMS(t, g, ids[0]); ms <= above || ids[0] <= last {
			t.Fatalf("id %d (ms %d) not above the previous holder's lease end %d or the last id", ids[0], ms, above)
		}
		last = ids[len(ids)-1]
		clock.Step(5 * time.Millisecond)
	}
	if sleeps.Load() != 0 {
		t.Fatalf("waited %d times at a modest rate", sleeps.Load())
	}
}

func TestLayoutCheckAt(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	l := DefaultLayout()
	short := DefaultLayout()
	short.TimeBits, short.WorkerBits = 36, 15 // 2^36 ms is 795 days
	short.Epoch = now.Add(-(1<<36)*time.Millisecond + 100*24*time.Hour)
	edge := short
	edge.Epoch = now.Add(-(1<<36)*time.Millisecond + MinTimeLeft)
	cases := []struct {
		name   string
		layout Layout
		want   string // "" for no error
	}{
		{"default", l, ""},
		{"epoch now", Layout{Epoch: now, TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 8}, ""},
		{"epoch in the future", Layout{Epoch: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 8},
			"--epoch 2030-01-01T00:00:00Z is in the future (now 2026-11-30T10:00:00Z)"},
		{"epoch a millisecond ahead", Layout{Epoch: now.Add(time.Millisecond), TimeBits: 41, WorkerBits: 10, SeqBits: 12, GeneBits: 8}, "in the future"},
		{"100 days of time bits left", short, "time bits run out at 2027-03-10T10:00:00Z: fewer than a year left"},
		{"exactly a year left", edge, ""},
		{"62 time bits", Layout{Epoch: DefaultEpoch, TimeBits: 62, WorkerBits: 0, SeqBits: 1}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.layout.CheckAt(now)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%s: %v", tc.layout, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%s: got %v, want %q", tc.layout, err, tc.want)
			}
		})
	}
	// New checks against its own clock.
	clock := &fakeClock{t: time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := New(Config{Layout: DefaultLayout(), LeaseEndMS: math.MaxInt64}, clock.Now, &memstore.HighWater{}); err == nil || !strings.Contains(err.Error(), "in the future") {
		t.Fatalf("New before the epoch: %v", err)
	}
}

// TestStaleClockReadingIsNotClockBack: a caller reads the clock before it
// takes the lock; by then another caller may have moved the logical clock
// past that reading. That is not the clock going back.
func TestStaleClockReadingIsNotClockBack(t *testing.T) {
	clock := newFakeClock()
	var stale atomic.Pointer[time.Time]
	now := func() time.Time {
		if s := stale.Swap(nil); s != nil {
			return *s
		}
		return clock.Now()
	}
	var sleeps atomic.Int64
	g, err := New(Config{Layout: DefaultLayout(), MaxBorrow: 0, LeaseEndMS: math.MaxInt64, Sleep: clock.sleeper(&sleeps)}, now, &memstore.HighWater{})
	if err != nil {
		t.Fatal(err)
	}
	before := clock.Now()
	clock.Step(5 * time.Millisecond)
	if _, err := g.NextID(); err != nil { // the logical clock moves to the wall
		t.Fatal(err)
	}
	stale.Store(&before) // the next caller read the clock 5 ms ago
	if _, err := g.NextIDs(nil, 1); err != nil {
		t.Fatalf("a reading 5 ms stale: %v", err)
	}
}

// A crash loop under load: every run issues 8192 IDs a millisecond, twice
// what the layout holds, so the logical clock borrows ahead of the wall
// clock, and every run is killed (no Close) 200 ms in and restarted 50 ms
// later, so each start begins at the previous run's reservation. The clock
// never goes back: no run may answer CLOCKBACK or report the clock behind
// (the node would take a fresh worker ID and restart its order), NEXTIDs
// increase across every restart, and the logical clock stays within a
// window, the borrow and a margin of the wall clock.
func TestCrashLoopUnderLoadIsNotClockBack(t *testing.T) {
	clock := newFakeClock()
	store := &memstore.HighWater{}
	var sleeps atomic.Int64
	var last int64
	for restart := range 30 {
		g := newGen(t, clock, store, func(c *Config) { c.Sleep = clock.sleeper(&sleeps) })
		for range 200 {
			clock.Step(time.Millisecond)
			ids, err := g.NextIDs(nil, 8192)
			if err != nil {
				t.Fatalf("restart %d: %v (status %+v)", restart, err, g.Status())
			}
			if st := g.Status(); st.ClockBehindMS != 0 {
				t.Fatalf("restart %d: clock reported %d ms behind, it never went back (status %+v)", restart, st.ClockBehindMS, st)
			}
			if ids[0] <= last {
				t.Fatalf("restart %d: NEXTID %d not above %d issued before", restart, ids[0], last)
			}
			last = ids[len(ids)-1]
		}
		st := g.Status()
		if lead := st.LastTimeMS - clock.sinceEpochMS(); lead > 3000+1000+3000/32 {
			t.Fatalf("restart %d: logical clock %d ms ahead of the wall clock", restart, lead)
		}
		clock.Step(50 * time.Millisecond) // the kill and the new process
	}
}

// NEXTIDs and GENEIDs of random genes interleaved, as a node serving both
// sees them: NEXTID steps over the slots the GENEIDs took, not over the
// rest of their rows, so the mix fills the millisecond nearly as either
// alone does.
func TestNextAndGeneMixFillsTheMillisecond(t *testing.T) {
	clock := newFakeClock()
	g := newGen(t, clock, &memstore.HighWater{}, func(c *Config) { c.MaxBorrow = time.Hour; c.Window = 2 * time.Hour })
	r := rand.New(rand.NewPCG(7, 8))
	const n = 409600
	lo, hi := int64(1<<62), int64(0)
	var lastNext int64
	seen := issuedSet{}
	for issued := 0; issued < n; {
		var ids []int64
		var err error
		next := true
		switch r.IntN(3) {
		case 0:
			ids, err = g.NextIDs(nil, 1)
		case 1:
			ids, err = g.NextIDs(nil, 50)
		default:
			next = false
			ids, err = g.GeneIDs(nil, uint32(r.IntN(1e9)), 1+r.IntN(20))
		}
		if err != nil {
			t.Fatal(err)
		}
		seen.add(t, ids...)
		for _, id := range ids {
			p, _ := g.Layout().Decode(id)
			lo, hi = min(lo, p.UnixMS), max(hi, p.UnixMS)
		}
		if next {
			for _, id := range ids {
				if id <= lastNext {
					t.Fatalf("NEXTID %d after %d", id, lastNext)
				}
				lastNext = id
			}
		}
		issued += len(ids)
	}
	perMS := float64(n) / float64(hi-lo+1)
	t.Logf("NEXTID and random-gene GENEID mixed: %.0f IDs per ms (ceiling 4096)", perMS)
	if perMS < 0.9*4096 {
		t.Fatalf("the mix reached %.0f IDs per ms, want close to 4096", perMS)
	}
}

// A mark stored without the wall clock it was written at (as a build
// before the stored clock wrote it) counts its lead beyond one window as the
// clock going back: 5 s ahead of the clock is CLOCKBACK, 3.5 s is not.
func TestMarkWithoutItsClockCountsTheLeadBeyondAWindow(t *testing.T) {
	for _, c := range []struct {
		ahead     time.Duration
		clockBack bool
	}{{3500 * time.Millisecond, false}, {5 * time.Second, true}} {
		clock := newFakeClock()
		store := &memstore.HighWater{}
		if err := store.SetHighWaterSync(clock.sinceEpochMS() + c.ahead.Milliseconds()); err != nil {
			t.Fatal(err)
		}
		g := newGen(t, clock, store, nil)
		_, err := g.NextID()
		if got := errors.Is(err, ErrClockBack); got != c.clockBack || (!got && err != nil) {
			t.Fatalf("mark %v ahead: %v, want CLOCKBACK %v", c.ahead, err, c.clockBack)
		}
		if behind := g.Status().ClockBehindMS; (behind > 1000) != c.clockBack {
			t.Fatalf("mark %v ahead: ClockBehindMS %d", c.ahead, behind)
		}
	}
}
