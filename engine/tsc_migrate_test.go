package engine

import (
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"idserver/internal/testproc"
)

// TestCounterAcrossCPUs: with this process's threads moved between CPUs
// every few milliseconds (taskset -a -p, on this test's own PID), and
// callers on two goroutines, no ID carries a millisecond that was over
// before it was asked for. It logs whether the counter stayed in use: a
// pair split across two CPUs that finds the counter back drops it (the
// safe way), which would only cost speed.
func TestCounterAcrossCPUs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to move between")
	}
	taskset := testproc.Need(t, "taskset")
	g := counterGenerator(t)
	pid := strconv.Itoa(os.Getpid())
	defer exec.Command(taskset, "-a", "-p", "-c", "0-"+strconv.Itoa(runtime.NumCPU()-1), pid).Run()

	const run = 3 * tscSpan
	stop := time.Now().Add(run)
	moves := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cpu := 0; time.Now().Before(stop); cpu ^= 1 {
			if out, err := exec.Command(taskset, "-a", "-p", "-c", strconv.Itoa(cpu), pid).CombinedOutput(); err != nil {
				t.Errorf("taskset: %v: %s", err, out)
				return
			}
			moves++
			time.Sleep(time.Duration(rand.Int64N(int64(3 * time.Millisecond))))
		}
	}()
	var mu sync.Mutex
	calls, late := 0, 0
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, l := issueInBursts(t, g, stop, func() (int64, error) {
				if rand.IntN(8) == 0 {
					ids, err := g.NextIDs(nil, 1)
					if err != nil {
						return 0, err
					}
					return ids[0], nil
				}
				return g.NextID()
			})
			mu.Lock()
			calls, late = calls+n, late+l
			mu.Unlock()
		}()
	}
	wg.Wait()
	<-done
	g.mu.Lock()
	on, trusted, rate := g.tsc.on.Load(), g.tsc.trusted, g.tsc.rate
	g.mu.Unlock()
	t.Logf("%d IDs over %v, %d CPU moves, %d with a millisecond already over; counter on %v (trusted %v, rate %.4f)",
		calls, run, moves, late, on, trusted, rate)
}

// TestCounterSwitchAndCloseExpire: with the counter check on and the
// fast path hot, SwitchWorker and Close end the limit in force. Right after
// a switch to a worker whose lease ends at the millisecond just issued, no
// call gets an ID (the old worker's limit, still in force, would hand one
// out); right after Close, none does either. Where the kernel's clock is
// not the counter, the same holds on the monotonic clock.
func TestCounterSwitchAndCloseExpire(t *testing.T) {
	g := counterGenerator(t)
	// The counter's rate is measured over the first span (a pair taken
	// with a preemption inside does not count): be past it.
	for end := time.Now().Add(10 * tscSpan); TSCTrusted() && !g.tsc.on.Load() && time.Now().Before(end); {
		if _, err := g.NextID(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if on := g.tsc.on.Load(); on != TSCTrusted() {
		t.Fatalf("the counter in use: %v after %v, want %v (trusted %v, rate %v)", on, 10*tscSpan, TSCTrusted(), g.tsc.trusted, g.tsc.rate)
	}
	hot := func() int64 {
		t.Helper()
		var id int64
		var err error
		for range 3 { // the second and third on the fast path, unless a millisecond ended
			if id, err = g.NextID(); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	for i := range 200 {
		ms := idMS(t, g, hot())
		if err := g.SwitchWorker(int64(2+i%8), ms-1, ms); err != nil {
			t.Fatal(err)
		}
		if id, err := g.NextID(); err == nil {
			t.Fatalf("switch %d: ID %d (ms %d) on a worker whose lease ended at ms %d", i, id, idMS(t, g, id), ms)
		}
		if err := g.SwitchWorker(int64(2+i%8), ms, math.MaxInt64); err != nil {
			t.Fatal(err)
		}
	}
	hot()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if id, err := g.NextID(); err != ErrClosed {
		t.Fatalf("after Close: ID %d, error %v", id, err)
	}
}
