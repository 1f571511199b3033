package cluster

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/wait"
)

// clockLoad issues NEXTID 50 from a few connections until stopped, keeping
// every ID and when each reply was asked for and came back.
type clockLoad struct {
	mu      sync.Mutex
	seen    map[int64]bool
	replies []loadReply
	errs    map[string]int // error replies by their text, numbers taken out
	stop    chan struct{}
	wg      sync.WaitGroup
	t       *testing.T
}

// digits: error texts are counted with their numbers taken out.
var digits = regexp.MustCompile(`[0-9]+`)

type loadReply struct {
	sent, got time.Time
	ids       []int64
	err       string
}

// startClockLoad runs conns connections, each pausing pace between its
// requests (0: none).
func startClockLoad(t *testing.T, addr string, conns int, pace time.Duration) *clockLoad {
	l := &clockLoad{seen: map[int64]bool{}, errs: map[string]int{}, stop: make(chan struct{}), t: t}
	for range conns {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 5 * time.Second})
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer rdb.Close()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				sent := time.Now()
				ids, err := rdb.Do(context.Background(), "NEXTID", 50).Int64Slice()
				r := loadReply{sent: sent, got: time.Now(), ids: ids}
				if err != nil {
					r.err = err.Error()
					time.Sleep(2 * time.Millisecond) // a refused request is retried, not spun
				}
				l.add(r)
				time.Sleep(pace)
			}
		}()
	}
	return l
}

func (l *clockLoad) add(r loadReply) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replies = append(l.replies, r)
	if r.err != "" {
		l.errs[digits.ReplaceAllString(r.err, "N")]++
		return
	}
	for i, id := range r.ids {
		if l.seen[id] {
			l.t.Errorf("duplicate ID %d", id)
		}
		l.seen[id] = true
		if i > 0 && id <= r.ids[i-1] {
			l.t.Errorf("one reply's IDs do not increase: %d then %d", r.ids[i-1], id)
		}
	}
}

// outage is how long after at the first reply to a request sent at or
// after at came back with IDs, and the error replies to requests sent in
// between.
func (l *clockLoad) outage(at time.Time) (time.Duration, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []string
	for _, r := range l.replies {
		if r.sent.Before(at) {
			continue
		}
		if r.err == "" {
			return r.got.Sub(at), errs
		}
		if len(errs) < 3 {
			errs = append(errs, r.err)
		}
	}
	return -1, errs
}

func (l *clockLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// workerOf is the worker ID of an ID with seqBits sequence bits and
// workerBits worker bits.
func workerOf(id int64, seqBits, workerBits uint) int64 { return id >> seqBits & (1<<workerBits - 1) }

// TestClockJumpsAreNotOutages: one node (its own leader) under load, its
// clock stepped through DEBUG CLOCK: +3 h, back to 0 (3 h back), -24 h,
// +1 h. Each step back beyond --max-borrow makes the node take a fresh
// worker ID and go on issuing; each step forward renews the lease at once.
// Every ID is checked unique, each reply increasing; the outage per step
// is measured from the step (DEBUG CLOCK's answer) to the first reply
// with IDs to a request sent after it. Then the node is killed with its clock 3 h ahead and
// restarted: its high-water is 3 h ahead of the clock, and it takes a
// fresh worker ID at start instead of answering CLOCKBACK.
func TestClockJumpsAreNotOutages(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	dir := t.TempDir()
	args := []string{"--enable-debug-command", "--time-bits", "41", "--worker-bits", "3", "--seq-bits", "19",
		"--worker-lease", "2s"}
	p, err := systest.Launch(t, dir, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	ctl := p.Client()
	ctx := context.Background()
	began := time.Now()
	load := startClockLoad(t, p.Addr, 4, 0)
	wait.For(t, 10*time.Second, "IDs under load", func() (bool, string) {
		out, errs := load.outage(began)
		return out >= 0, fmt.Sprint(errs)
	})
	steps := []struct {
		name     string
		offsetMS int64
		back     bool
	}{
		{"+3h", 3 * 3600_000, false},
		{"back 3h", 0, true},
		{"-24h", -24 * 3600_000, true},
		{"+1h", -23 * 3600_000, false},
		{"back 1h", -24 * 3600_000, true},
		{"+24h", 0, false},
	}
	var lastWorker int64 = -1
	var report []string
	for _, s := range steps {
		if err := ctl.Do(ctx, "DEBUG", "CLOCK", s.offsetMS).Err(); err != nil {
			t.Fatal(err)
		}
		at := time.Now() // the step is in effect once DEBUG CLOCK answers
		// Each step comes more than --max-borrow (1 s) after the one
		// before: a step back within it of a fresh worker's start is
		// borrowed, not met with a fresh worker. The time is the
		// condition.
		time.Sleep(1500 * time.Millisecond)
		out, errs := load.outage(at)
		if out < 0 || out > 2*time.Second {
			load.end()
			t.Fatalf("step %s: no IDs within %v of the step (outage %v); errors: %q", s.name, time.Since(at), out, errs)
		}
		info := systest.ClusterInfo(t, ctl)
		var w int64
		fmt.Sscan(info["worker_id"], &w)
		if s.back && w == lastWorker {
			t.Errorf("step %s: still on worker %d", s.name, w)
		}
		report = append(report, fmt.Sprintf("%s: %v (errors %d: %q) worker %s retired %s", s.name, out.Round(time.Millisecond),
			len(errs), errs, info["worker_id"], info["worker_retired"]))
		lastWorker = w
	}
	load.end()
	for _, r := range report {
		t.Log(r)
	}
	t.Logf("%d IDs, all unique; error replies: %v", len(load.seen), load.errs)
	for e := range load.errs {
		if strings.Contains(e, "lease ended") {
			t.Errorf("an error names the lease, not the clock: %q", e)
		}
	}

	// Killed with the clock 3 h ahead, restarted on the real clock.
	if err := ctl.Do(ctx, "DEBUG", "CLOCK", 3*3600_000).Err(); err != nil {
		t.Fatal(err)
	}
	var before []int64
	for deadline := time.Now().Add(5 * time.Second); len(before) < 1000 && time.Now().Before(deadline); {
		ids, err := ctl.Do(ctx, "NEXTID", 100).Int64Slice()
		if err == nil {
			before = append(before, ids...)
		}
	}
	if len(before) < 1000 {
		t.Fatal("no IDs 3 h ahead")
	}
	p.Kill()
	<-p.Done()
	started := time.Now()
	p2, err := systest.Launch(t, dir, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	rdb := p2.Client()
	ids, err := rdb.Do(ctx, "NEXTID", 100).Int64Slice()
	if err != nil {
		t.Fatalf("after a restart with the high-water 3 h ahead: %v\n%s", err, p2.Log())
	}
	t.Logf("restarted 3 h behind its high-water: issuing %v after the start; worker %d -> %d", time.Since(started).Round(time.Millisecond),
		workerOf(before[0], 19, 3), workerOf(ids[0], 19, 3))
	seen := map[int64]bool{}
	for id := range load.seen {
		seen[id] = true
	}
	for _, id := range append(before, ids...) {
		if seen[id] {
			t.Fatalf("ID %d issued twice across the restart", id)
		}
		seen[id] = true
	}
	if ahead := time.Duration(before[0]>>22-ids[0]>>22) * time.Millisecond; ahead < 2*time.Hour {
		t.Fatalf("IDs asked for once DEBUG CLOCK +3h answered are only %v ahead of those after the restart: the step was not in effect", ahead)
	}
	if workerOf(ids[0], 19, 3) == workerOf(before[0], 19, 3) || ids[0] >= before[0] {
		t.Fatalf("restart did not take a fresh worker: %d after %d", ids[0], before[0])
	}
}

// TestClockStepsDoNotExhaustWorkers: four worker IDs (--worker-bits 2), a
// 1 s lease, and the clock stepped back 2 s and forward again every 2 s,
// 10 times: each step back takes a fresh worker ID, and the old ones come
// back to the pool after their leases, so the pool never runs dry (each
// back step issues within a second; the worker IDs go round). Every ID is
// unique.
func TestClockStepsDoNotExhaustWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	p, err := systest.Launch(t, t.TempDir(), nil, "--enable-debug-command", "--time-bits", "41", "--worker-bits", "2", "--seq-bits", "20",
		"--worker-lease", "1s", "--max-borrow", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	ctl := p.Client()
	ctx := context.Background()
	load := startClockLoad(t, p.Addr, 2, 0)
	workers := map[string]int{}
	var worst time.Duration
	for i := range 10 {
		if err := ctl.Do(ctx, "DEBUG", "CLOCK", -2000).Err(); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		// The scenario steps every 2 s (back, then 1 s later forward) so
		// that the 1 s leases of the workers given up run out in between:
		// the pacing is the test, not a wait for an event.
		time.Sleep(time.Second)
		out, errs := load.outage(at)
		info := systest.ClusterInfo(t, ctl)
		if out < 0 || out > time.Second {
			t.Fatalf("step back %d: outage %v, errors %q; worker %s, retired %s", i, out, errs, info["worker_id"], info["worker_retired"])
		}
		worst = max(worst, out)
		workers[info["worker_id"]]++
		if err := ctl.Do(ctx, "DEBUG", "CLOCK", 0).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the other half of the 2 s step
	}
	load.end()
	if len(workers) > 4 || len(workers) < 2 {
		t.Fatalf("worker IDs after the steps back: %v", workers)
	}
	load.mu.Lock()
	n := len(load.seen)
	load.mu.Unlock()
	t.Logf("10 steps back of 2 s: worst outage %v; worker IDs taken %v; %d IDs, all unique; error replies %v", worst, workers, n, load.errs)
	if n == 0 {
		t.Fatal(errors.New("nothing issued"))
	}
}

// TestClockJumpsInACluster: three processes under load on all of them;
// the leader's clock steps back 1 h, then a follower's (its fresh worker
// ID comes from the leader over the node-to-node channel), then the other
// follower's goes 3 h ahead and back. Each takes a fresh worker ID and
// issues again within a second; every ID of the three is unique.
func TestClockJumpsInACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	common := []string{"--enable-debug-command", "--worker-lease", "2s"}
	leader, err := systest.Launch(t, t.TempDir(), nil, common...)
	if err != nil {
		t.Fatal(err)
	}
	procs := []*systest.Proc{leader}
	for range 2 {
		p, err := systest.Launch(t, t.TempDir(), nil, append(common, "--join", leader.Addr)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Client().Do(context.Background(), "NEXTID").Err(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	ctx := context.Background()
	seen := map[int64]string{}
	loads := make([]*clockLoad, 3)
	for i, p := range procs {
		loads[i] = startClockLoad(t, p.Addr, 2, time.Millisecond) // paced: three nodes share the cores
	}
	// worker is the worker ID CLUSTER INFO names.
	worker := func(rdb *redis.Client) string { return systest.ClusterInfo(t, rdb)["worker_id"] }
	// Past the first second: a step back within --max-borrow of a node's
	// start is borrowed from the start, not taken as a clock fault at once.
	// The time since the start is the condition: a fixed wait.
	time.Sleep(2 * time.Second)
	for _, s := range []struct {
		name     string
		node     int
		offsetMS []int64
	}{
		{"leader back 1h", 0, []int64{-3600_000}},
		{"follower back 1h", 1, []int64{-3600_000}},
		{"follower +3h and back", 2, []int64{3 * 3600_000, 0}},
	} {
		ctl := procs[s.node].Client()
		before := systest.ClusterInfo(t, ctl)["worker_id"]
		var at time.Time
		for k, off := range s.offsetMS {
			if err := ctl.Do(ctx, "DEBUG", "CLOCK", off).Err(); err != nil {
				t.Fatal(err)
			}
			at = time.Now()
			// IDs again, and after the last step a fresh worker (the IDs
			// right after a step back may be borrowed on the old one).
			last := k == len(s.offsetMS)-1
			wait.Until(5*time.Second, func() (bool, string) {
				out, _ := loads[s.node].outage(at)
				return out >= 0 && (!last || worker(ctl) != before), ""
			})
		}
		out, errs := loads[s.node].outage(at)
		info := systest.ClusterInfo(t, ctl)
		if out < 0 || out > 2*time.Second || info["worker_id"] == before {
			t.Fatalf("%s: outage %v, errors %q, worker %s -> %s", s.name, out, errs, before, info["worker_id"])
		}
		t.Logf("%s: outage %v, worker %s -> %s, retired %s", s.name, out.Round(time.Millisecond), before, info["worker_id"], info["worker_retired"])
	}
	for i, l := range loads {
		l.end()
		for id := range l.seen {
			if other, dup := seen[id]; dup {
				t.Fatalf("ID %d from node %d and %s", id, i, other)
			}
			seen[id] = fmt.Sprint(i)
		}
		t.Logf("node %d: %d IDs, error replies %v", i, len(l.seen), l.errs)
	}
}
