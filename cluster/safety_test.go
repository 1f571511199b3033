package cluster_test

// In-process tests of "never a duplicate, whatever the operator does": the
// node the binary runs, real Raft and real RESP on loopback.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	idnode "idserver/node"
)

func shortLease(c *idnode.Config) { c.WorkerLease = 2 * time.Second }

func startLeased(t *testing.T, size int) testcluster.Cluster {
	t.Helper()
	n1, err := testcluster.Open(t, "n1", t.TempDir(), nil, shortLease)
	if err != nil {
		t.Fatal(err)
	}
	nodes := testcluster.Cluster{n1}
	for i := 2; i <= size; i++ {
		n, err := testcluster.Open(t, "n"+string(rune('0'+i)), t.TempDir(), n1, shortLease)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// idCollector keeps every snowflake ID and fails on a repeat.
type idCollector struct {
	mu   sync.Mutex
	seen map[int64]string
	by   map[string]int // IDs per node
	t    *testing.T
}

// from counts the IDs who issued.
func (c *idCollector) from(who string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[who]
}

func (c *idCollector) add(who string, ids []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if other, dup := c.seen[id]; dup {
			c.t.Errorf("ID %d issued by %s and %s", id, other, who)
		}
		c.seen[id] = who
	}
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.by[who] += len(ids)
}

// issueUntil runs NEXTID 100 on rdb until stop closes; it returns the
// first error reply's text (the loop goes on after errors).
func issueUntil(ids *idCollector, who string, rdb *redis.Client, stop chan struct{}, firstErr *atomic.Pointer[string], errAt *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			v, err := rdb.Do(context.Background(), "NEXTID", 100).Int64Slice()
			if err != nil {
				msg := err.Error()
				if firstErr.CompareAndSwap(nil, &msg) {
					errAt.Store(time.Now().UnixMilli())
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			ids.add(who, v)
		}
	}()
	return &wg
}

// TestForgottenNodeThatRunsOn: CLUSTER FORGET of a node that keeps
// running, and a new node given its worker ID: the forgotten node stops
// issuing when its lease ends, saying why, and no ID is issued twice. The
// forgotten node restarted with its data is refused as removed.
func TestForgottenNodeThatRunsOn(t *testing.T) {
	testproc.Long(t)
	nodes := startLeased(t, 3)
	ids := &idCollector{seen: map[int64]string{}, t: t}
	stop := make(chan struct{})
	var n3Err, n4Err atomic.Pointer[string]
	var n3ErrAt, n4ErrAt atomic.Int64
	gone := nodes[2]
	w3 := issueUntil(ids, "n3", gone.Client, stop, &n3Err, &n3ErrAt)
	wait.For(t, 10*time.Second, "n3 issues IDs", func() (bool, string) { return ids.from("n3") > 0, fmt.Sprint(n3Err.Load()) })
	ctx := context.Background()
	if err := testcluster.RetryTryAgain(func() error { return nodes[0].Client.Do(ctx, "CLUSTER", "FORGET", "n3").Err() }); err != nil {
		t.Fatal(err)
	}
	forgotAt := time.Now()
	// A forgotten node that still runs was told: it hands out no more
	// values, not even buffered ones (a SET after the FORGET would miss it).
	if err := gone.Client.Do(ctx, "INCR", "after-forget").Err(); err == nil || !strings.Contains(err.Error(), "removed by its cluster") {
		t.Fatalf("INCR on the forgotten node: %v", err)
	}
	n4, err := testcluster.Open(t, "n4", t.TempDir(), nodes[0], shortLease)
	if err != nil {
		t.Fatal(err)
	}
	if n4.Worker != gone.Worker {
		t.Fatalf("n4 got worker %d, not the forgotten %d", n4.Worker, gone.Worker)
	}
	w4 := issueUntil(ids, "n4", n4.Client, stop, &n4Err, &n4ErrAt)
	// Both issue until the forgotten node's lease ends; n4 goes on after.
	wait.For(t, 10*time.Second, "the forgotten node stops issuing and n4 issues after it", func() (bool, string) {
		n4IDs := ids.from("n4")
		if n3Err.Load() == nil {
			return false, fmt.Sprintf("n3 still issues; n4 issued %d", n4IDs)
		}
		return n4IDs > 1000, fmt.Sprintf("n4 issued %d", n4IDs)
	})
	close(stop)
	w3.Wait()
	w4.Wait()
	msg := n3Err.Load()
	if msg == nil {
		t.Fatal("the forgotten node kept issuing NEXTID")
	}
	if !strings.HasPrefix(*msg, "TRYAGAIN") || !strings.Contains(*msg, "no longer a member") {
		t.Fatalf("the forgotten node's NEXTID: %s", *msg)
	}
	if after := time.UnixMilli(n3ErrAt.Load()).Sub(forgotAt); after > 3500*time.Millisecond {
		t.Fatalf("the forgotten node issued for %v after FORGET, beyond its 2s lease", after)
	}
	if m := n4Err.Load(); m != nil {
		t.Fatalf("the new holder of the worker ID answered %s", *m)
	}
	gone.Stop()
	// Restarted with its data, it is refused as removed, which the program
	// then answers by moving the directory aside and joining again (the
	// process test TestRemovedPodBackWithItsVolumeJoinsAgain).
	_, err = testcluster.Open(t, "n3", gone.Dir, nodes[0], shortLease)
	if again, removed := idnode.Rejoin(idnode.Config{}, err); !removed || again.NodeID != "n3" || again.Join == "" {
		t.Fatalf("the forgotten node restarted with its data: %v (removed %v, rejoin as %q through %q)", err, removed, again.NodeID, again.Join)
	}
	before := len(ids.seen)
	t.Logf("forgotten while running: %d IDs from it and its worker's new holder, no repeat; it answered %q; restarted with its data, refused as removed", before, *msg)
}

// TestCutOffNodeStopsAtLeaseEnd: a node cut off from the quorum issues
// NEXTID until its lease ends, then TRYAGAIN saying why; healed, it renews
// and issues again.
func TestCutOffNodeStopsAtLeaseEnd(t *testing.T) {
	testproc.Long(t)
	nodes := startLeased(t, 3)
	lone := nodes[2]
	ctx := context.Background()
	lone.Stream.Partition(true)
	cut := time.Now()
	var served int
	var err error
	for time.Since(cut) < 6*time.Second {
		if err = lone.Client.Do(ctx, "NEXTID").Err(); err != nil {
			break
		}
		served++
	}
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN worker lease ended") {
		t.Fatalf("cut off for %v: %v", time.Since(cut), err)
	}
	if since := time.Since(cut); since > 3500*time.Millisecond || since < time.Second {
		t.Fatalf("cut off node stopped after %v with a 2s lease", since)
	}
	lone.Stream.Partition(false)
	wait.For(t, 15*time.Second, "NEXTID after healing", func() (bool, string) {
		err := lone.Client.Do(ctx, "NEXTID").Err()
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("cut off: %d NEXTIDs, then %q after %v; healed and issuing", served, "TRYAGAIN worker lease ended ...", time.Since(cut).Round(time.Millisecond))
}

// TestSetIsSeenByEveryMember: after SET tag v answers OK, INCR on
// any node, on the connection that just drew from its buffer, is above v.
func TestSetIsSeenByEveryMember(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	l := nodes.WaitLeader(t)
	for round := range 300 {
		tag := "t" + string(rune('a'+round%5))
		f := nodes[round%3]
		if err := testcluster.RetryTryAgain(func() error { return f.Client.Do(ctx, "INCR", tag).Err() }); err != nil {
			t.Fatal(err)
		}
		var high int64
		if err := testcluster.RetryTryAgain(func() (err error) {
			high, err = l.Client.Do(ctx, "GET", tag).Int64()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		v := high + 50
		via := nodes[(round/3)%3]
		if err := testcluster.RetryTryAgain(func() error { return via.Client.Do(ctx, "SET", tag, v).Err() }); err != nil {
			t.Fatalf("round %d: SET %s %d on %s: %v", round, tag, v, via.ID, err)
		}
		for _, n := range nodes {
			var got int64
			err := testcluster.RetryTryAgain(func() (err error) {
				got, err = n.Client.Do(ctx, "INCR", tag).Int64()
				return err
			})
			if err != nil || got <= v {
				t.Fatalf("round %d: INCR %s on %s after SET %d (sent to %s): %d %v", round, tag, n.ID, v, via.ID, got, err)
			}
		}
	}
}

// TestSetWithAMemberCutOff: a member that cannot be reached makes SET an
// error naming that member, before anything is dropped or committed; once
// healed, that member's values are above the floor.
func TestSetWithAMemberCutOff(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	l := nodes.WaitLeader(t)
	lone := nodes.Follower(t, l)
	if err := lone.Client.Do(ctx, "INCR", "s").Err(); err != nil {
		t.Fatal(err)
	}
	lone.Stream.Partition(true)
	if err := lone.Client.Do(ctx, "GET", "s").Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("GET on a node with no leader in reach: %v, want TRYAGAIN, not a stale high-water", err)
	}
	before, err := l.Client.Do(ctx, "INCR", "s").Int64()
	if err != nil {
		t.Fatal(err)
	}
	err = l.Client.Do(ctx, "SET", "s", 5000).Err()
	if err == nil || !strings.Contains(err.Error(), lone.ID) || !strings.Contains(err.Error(), "retrying it is safe") {
		t.Fatalf("SET with %s cut off: %v", lone.ID, err)
	}
	// The SET failed before it fenced anyone: the leader's buffer is whole.
	if after, err := l.Client.Do(ctx, "INCR", "s").Int64(); err != nil || after != before+1 {
		t.Fatalf("INCR on the leader after a SET that could not reach %s: %d %v, want %d", lone.ID, after, err, before+1)
	}
	lone.Stream.Partition(false)
	wait.For(t, 15*time.Second, "SET retried after healing", func() (bool, string) {
		err := l.Client.Do(ctx, "SET", "s", 5000).Err()
		return err == nil, fmt.Sprint(err)
	})
	if v, err := lone.Client.Do(ctx, "INCR", "s").Int64(); err != nil || v <= 5000 {
		t.Fatalf("INCR on the healed member: %d %v", v, err)
	}
}

// TestSetRefusedAfterWaitingForARemovedMemberDropsNothing: a SET that
// waits for a member removed while cut off (until its lease has ended),
// and meanwhile fell below what another member issued, is refused with
// nothing dropped: that member's buffer is whole after it. (A SET that
// asked what was issued before its wait was refused only after its fence
// had dropped every member's buffer: the rolling replacement test saw
// such SETs, refused after 2-3 s of waiting, empty every pod's buffer.)
func TestSetRefusedAfterWaitingForARemovedMemberDropsNothing(t *testing.T) {
	testproc.Long(t)
	nodes := startLeased(t, 3)
	ctx := context.Background()
	l := nodes.WaitLeader(t)
	lone := nodes.Follower(t, l)
	var busy *testcluster.Node
	for _, n := range nodes {
		if n != l && n != lone {
			busy = n
		}
	}
	first, err := busy.Client.Do(ctx, "INCR", "w").Int64()
	if err != nil {
		t.Fatal(err)
	}
	lone.Stream.Partition(true)
	if err := l.Client.Do(ctx, "CLUSTER", "FORGET", lone.ID).Err(); err != nil {
		t.Fatal(err)
	}
	v := first + 5
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- l.Client.Do(ctx, "SET", "w", v).Err() }()
	// The SET waits for the removed member's lease (about 2.5 s), which
	// nothing outside the leader shows: half a second puts these INCRs
	// inside that wait.
	time.Sleep(500 * time.Millisecond)
	last := first
	for last <= v+5 {
		if last, err = busy.Client.Do(ctx, "INCR", "w").Int64(); err != nil {
			t.Fatal(err)
		}
	}
	err = <-done
	waited := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "values never go back") {
		t.Fatalf("SET w %d after %s issued %d: %v, want a refusal", v, busy.ID, last, err)
	}
	if waited < time.Second {
		t.Fatalf("the SET answered after %v: it did not wait for the removed member's 2s lease", waited)
	}
	if next, err := busy.Client.Do(ctx, "INCR", "w").Int64(); err != nil || next != last+1 {
		t.Fatalf("INCR on %s after the refused SET: %d %v, want %d (its buffer was dropped)", busy.ID, next, err, last+1)
	}
	t.Logf("SET refused after waiting %v for the removed member, %s's buffer whole", waited.Round(time.Millisecond), busy.ID)
}

// TestSetRacingLargeIncrByDoesNotDeadlock: SET on the leader races
// INCRBY larger than the segment step on a follower for 20s; the follower's
// state machine keeps applying, INFO answers, and it shuts down.
func TestSetRacingLargeIncrByDoesNotDeadlock(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	l := nodes.WaitLeader(t)
	f := nodes.Follower(t, l)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sets, incrs atomic.Int64
	wg.Add(3)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if v, err := l.Client.Do(ctx, "GET", "x").Int64(); err == nil && l.Client.Do(ctx, "SET", "x", v+1).Err() == nil {
				sets.Add(1)
			}
		}
	}()
	for range 2 {
		go func() {
			defer wg.Done()
			last := int64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := f.Client.Do(ctx, "INCRBY", "x", 5000).Int64()
				if err != nil {
					continue
				}
				if v <= last {
					t.Errorf("INCRBY on %s went from %d to %d", f.ID, last, v)
				}
				last = v
				incrs.Add(1)
			}
		}()
	}
	// A soak: the deadlock is a race that needs time to come up, and
	// nothing shows it has been given its chance.
	time.Sleep(20 * time.Second)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("clients stuck: the follower deadlocked")
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, cmd := range [][]any{{"INFO"}, {"CLUSTER", "INFO"}} {
		if err := f.Client.Do(ictx, cmd...).Err(); err != nil {
			t.Fatalf("%s on the follower after the race: %v", cmd, err)
		}
	}
	closed := make(chan struct{})
	go func() { f.Stop(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower did not shut down")
	}
	if sets.Load() == 0 || incrs.Load() == 0 {
		t.Fatalf("the race did not run: %d SETs, %d INCRBYs", sets.Load(), incrs.Load())
	}
	t.Logf("20s of SET on the leader racing INCRBY 5000 on a follower: %d SETs, %d INCRBYs, no deadlock", sets.Load(), incrs.Load())
}

// TestForgetTheLeader: CLUSTER FORGET of the leader, sent to another
// member, hands leadership over and succeeds on a retry.
func TestForgetTheLeader(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	l := nodes.WaitLeader(t)
	other := nodes.Follower(t, l)
	wait.For(t, 15*time.Second, "FORGET of the leader through "+other.ID, func() (bool, string) {
		err := other.Client.Do(ctx, "CLUSTER", "FORGET", l.ID).Err()
		if err != nil && !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Fatalf("FORGET of the leader through %s: %v", other.ID, err)
		}
		return err == nil, fmt.Sprint(err)
	})
	l.Stop()
	if err := other.Client.Do(ctx, "INCR", "after").Err(); err != nil {
		t.Fatalf("INCR after forgetting the old leader: %v", err)
	}
}
