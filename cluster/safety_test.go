package cluster_test

// In-process tests of "never a duplicate, whatever the operator does": the
// node the binary runs, real Raft and real RESP on loopback.

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
	idnode "idserver/node"
)

func shortLease(c *idnode.Config) { c.WorkerLease = 2 * time.Second }

func startLeased(t *testing.T, size int) []*node {
	t.Helper()
	n1, err := openNode(t, "n1", t.TempDir(), nil, shortLease)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*node{n1}
	for i := 2; i <= size; i++ {
		n, err := openNode(t, "n"+string(rune('0'+i)), t.TempDir(), n1, shortLease)
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
	t    *testing.T
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
	w3 := issueUntil(ids, "n3", gone.rdb, stop, &n3Err, &n3ErrAt)
	time.Sleep(300 * time.Millisecond)
	ctx := context.Background()
	if err := nodes[0].rdb.Do(ctx, "CLUSTER", "FORGET", "n3").Err(); err != nil {
		t.Fatal(err)
	}
	forgotAt := time.Now()
	// A forgotten node that still runs was told: it hands out no more
	// values, not even buffered ones (a SET after the FORGET would miss it).
	if err := gone.rdb.Do(ctx, "INCR", "after-forget").Err(); err == nil || !strings.Contains(err.Error(), "removed by its cluster") {
		t.Fatalf("INCR on the forgotten node: %v", err)
	}
	n4, err := openNode(t, "n4", t.TempDir(), nodes[0], shortLease)
	if err != nil {
		t.Fatal(err)
	}
	if n4.worker != gone.worker {
		t.Fatalf("n4 got worker %d, not the forgotten %d", n4.worker, gone.worker)
	}
	w4 := issueUntil(ids, "n4", n4.rdb, stop, &n4Err, &n4ErrAt)
	time.Sleep(4 * time.Second)
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
	gone.stop()
	// Restarted with its data, it is refused as removed, which the program
	// then answers by moving the directory aside and joining again (the
	// process test TestRemovedPodBackWithItsVolumeJoinsAgain).
	_, err = openNode(t, "n3", gone.dir, nodes[0], shortLease)
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
	lone.stream.partition(true)
	cut := time.Now()
	var served int
	var err error
	for time.Since(cut) < 6*time.Second {
		if err = lone.rdb.Do(ctx, "NEXTID").Err(); err != nil {
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
	lone.stream.partition(false)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = lone.rdb.Do(ctx, "NEXTID").Err(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after healing: %v", err)
		}
	}
	t.Logf("cut off: %d NEXTIDs, then %q after %v; healed and issuing", served, "TRYAGAIN worker lease ended ...", time.Since(cut).Round(time.Millisecond))
}

// TestSetIsSeenByEveryMember: after SET tag v answers OK, INCR on
// any node, on the connection that just drew from its buffer, is above v.
func TestSetIsSeenByEveryMember(t *testing.T) {
	testproc.Long(t)
	nodes := startCluster(t, 3, 0)
	ctx := context.Background()
	l := leader(t, nodes)
	for round := range 300 {
		tag := "t" + string(rune('a'+round%5))
		f := nodes[round%3]
		if err := f.rdb.Do(ctx, "INCR", tag).Err(); err != nil {
			t.Fatal(err)
		}
		high, err := l.rdb.Do(ctx, "GET", tag).Int64()
		if err != nil {
			t.Fatal(err)
		}
		v := high + 50
		via := nodes[(round/3)%3]
		if err := via.rdb.Do(ctx, "SET", tag, v).Err(); err != nil {
			t.Fatalf("round %d: SET %s %d on %s: %v", round, tag, v, via.id, err)
		}
		for _, n := range nodes {
			got, err := n.rdb.Do(ctx, "INCR", tag).Int64()
			if err != nil || got <= v {
				t.Fatalf("round %d: INCR %s on %s after SET %d (sent to %s): %d %v", round, tag, n.id, v, via.id, got, err)
			}
		}
	}
}

// TestSetWithAMemberCutOff: a member that cannot be reached makes SET an
// error naming that member, before anything is dropped or committed; once
// healed, that member's values are above the floor.
func TestSetWithAMemberCutOff(t *testing.T) {
	testproc.Long(t)
	nodes := startCluster(t, 3, 0)
	ctx := context.Background()
	l := leader(t, nodes)
	lone := follower(t, nodes, l)
	if err := lone.rdb.Do(ctx, "INCR", "s").Err(); err != nil {
		t.Fatal(err)
	}
	lone.stream.partition(true)
	if err := lone.rdb.Do(ctx, "GET", "s").Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("GET on a node with no leader in reach: %v, want TRYAGAIN, not a stale high-water", err)
	}
	before, err := l.rdb.Do(ctx, "INCR", "s").Int64()
	if err != nil {
		t.Fatal(err)
	}
	err = l.rdb.Do(ctx, "SET", "s", 5000).Err()
	if err == nil || !strings.Contains(err.Error(), lone.id) || !strings.Contains(err.Error(), "retrying it is safe") {
		t.Fatalf("SET with %s cut off: %v", lone.id, err)
	}
	// The SET failed before it fenced anyone: the leader's buffer is whole.
	if after, err := l.rdb.Do(ctx, "INCR", "s").Int64(); err != nil || after != before+1 {
		t.Fatalf("INCR on the leader after a SET that could not reach %s: %d %v, want %d", lone.id, after, err, before+1)
	}
	lone.stream.partition(false)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = l.rdb.Do(ctx, "SET", "s", 5000).Err(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET retried after healing: %v", err)
		}
	}
	if v, err := lone.rdb.Do(ctx, "INCR", "s").Int64(); err != nil || v <= 5000 {
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
	l := leader(t, nodes)
	lone := follower(t, nodes, l)
	var busy *node
	for _, n := range nodes {
		if n != l && n != lone {
			busy = n
		}
	}
	first, err := busy.rdb.Do(ctx, "INCR", "w").Int64()
	if err != nil {
		t.Fatal(err)
	}
	lone.stream.partition(true)
	if err := l.rdb.Do(ctx, "CLUSTER", "FORGET", lone.id).Err(); err != nil {
		t.Fatal(err)
	}
	v := first + 5
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- l.rdb.Do(ctx, "SET", "w", v).Err() }()
	time.Sleep(500 * time.Millisecond) // the SET waits for the removed member's lease (about 2.5 s)
	last := first
	for last <= v+5 {
		if last, err = busy.rdb.Do(ctx, "INCR", "w").Int64(); err != nil {
			t.Fatal(err)
		}
	}
	err = <-done
	waited := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "values never go back") {
		t.Fatalf("SET w %d after %s issued %d: %v, want a refusal", v, busy.id, last, err)
	}
	if waited < time.Second {
		t.Fatalf("the SET answered after %v: it did not wait for the removed member's 2s lease", waited)
	}
	if next, err := busy.rdb.Do(ctx, "INCR", "w").Int64(); err != nil || next != last+1 {
		t.Fatalf("INCR on %s after the refused SET: %d %v, want %d (its buffer was dropped)", busy.id, next, err, last+1)
	}
	t.Logf("SET refused after waiting %v for the removed member, %s's buffer whole", waited.Round(time.Millisecond), busy.id)
}

// TestSetRacingLargeIncrByDoesNotDeadlock: SET on the leader races
// INCRBY larger than the segment step on a follower for 20s; the follower's
// state machine keeps applying, INFO answers, and it shuts down.
func TestSetRacingLargeIncrByDoesNotDeadlock(t *testing.T) {
	testproc.Long(t)
	nodes := startCluster(t, 3, 0)
	l := leader(t, nodes)
	f := follower(t, nodes, l)
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
			if v, err := l.rdb.Do(ctx, "GET", "x").Int64(); err == nil && l.rdb.Do(ctx, "SET", "x", v+1).Err() == nil {
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
				v, err := f.rdb.Do(ctx, "INCRBY", "x", 5000).Int64()
				if err != nil {
					continue
				}
				if v <= last {
					t.Errorf("INCRBY on %s went from %d to %d", f.id, last, v)
				}
				last = v
				incrs.Add(1)
			}
		}()
	}
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
		if err := f.rdb.Do(ictx, cmd...).Err(); err != nil {
			t.Fatalf("%s on the follower after the race: %v", cmd, err)
		}
	}
	closed := make(chan struct{})
	go func() { f.stop(); close(closed) }()
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
	nodes := startCluster(t, 3, 0)
	ctx := context.Background()
	l := leader(t, nodes)
	other := follower(t, nodes, l)
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = other.rdb.Do(ctx, "CLUSTER", "FORGET", l.id).Err(); err == nil {
			break
		}
		if !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Fatalf("FORGET of the leader through %s: %v", other.id, err)
		}
	}
	if err != nil {
		t.Fatalf("FORGET of the leader never succeeded: %v", err)
	}
	l.stop()
	if err := other.rdb.Do(ctx, "INCR", "after").Err(); err != nil {
		t.Fatalf("INCR after forgetting the old leader: %v", err)
	}
}
