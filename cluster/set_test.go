package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testcluster"
	"idserver/internal/testproc"
)

// TestSetLowersBelowReservedValues: SET succeeds
// whenever no value above it was issued to a client, whatever the nodes
// hold in their buffers, and the next INCR answers v+1, as Redis does.
func TestSetLowersBelowReservedValues(t *testing.T) {
	testproc.Long(t)
	ctx := context.Background()
	t.Run("one node", func(t *testing.T) {
		n := testcluster.New(t, 1, nil)[0]
		for want := int64(1); want <= 2; want++ {
			if v, err := n.Client.Do(ctx, "INCR", "k").Int64(); err != nil || v != want {
				t.Fatalf("INCR k: %d %v, want %d", v, err, want)
			}
		}
		steps := []struct {
			cmd  []any
			want int64 // the reply of INCR k after cmd; 0: no INCR
		}{
			{[]any{"SET", "k", 100}, 101},   // below the 100 values reserved in the buffer
			{[]any{"SET", "k", 1000}, 1001}, // raising
			{[]any{"SET", "k", 1001}, 1002}, // the value last issued
			{[]any{"SET", "k", 5000}, 0},
			{[]any{"SET", "k", 2000}, 2001}, // below an earlier SET, above every value issued
		}
		for _, st := range steps {
			if err := n.Client.Do(ctx, st.cmd...).Err(); err != nil {
				t.Fatalf("%v: %v", st.cmd, err)
			}
			if st.want == 0 {
				continue
			}
			if v, err := n.Client.Do(ctx, "INCR", "k").Int64(); err != nil || v != st.want {
				t.Fatalf("INCR k after %v: %d %v, want %d", st.cmd, v, err, st.want)
			}
		}
		err := n.Client.Do(ctx, "SET", "k", 2000).Err()
		if err == nil || !strings.Contains(err.Error(), "values never go back") || !strings.Contains(err.Error(), "issued 2001") {
			t.Fatalf("SET below the value last issued: %v", err)
		}
		// A refused SET leaves no trace: the buffered values are still
		// there, and INCR answers the next one.
		if v, err := n.Client.Do(ctx, "INCR", "k").Int64(); err != nil || v != 2002 {
			t.Fatalf("INCR k after a refused SET: %d %v, want 2002", v, err)
		}
	})

	t.Run("three nodes", func(t *testing.T) {
		nodes := testcluster.New(t, 3, nil)
		l := nodes.WaitLeader(t)
		f := nodes.Follower(t, l)
		if err := f.Client.Do(ctx, "INCR", "k").Err(); err != nil {
			t.Fatal(err)
		}
		top, err := l.Client.Do(ctx, "INCR", "k").Int64() // from a segment above the follower's
		if err != nil {
			t.Fatal(err)
		}
		err = f.Client.Do(ctx, "SET", "k", top-1).Err()
		if err == nil || !strings.Contains(err.Error(), "values never go back") || !strings.Contains(err.Error(), l.ID) {
			t.Fatalf("SET %d below %d, issued by %s: %v", top-1, top, l.ID, err)
		}
		// Refused, it dropped nothing: each node goes on from its buffer.
		if v, err := l.Client.Do(ctx, "INCR", "k").Int64(); err != nil || v != top+1 {
			t.Fatalf("INCR on the leader after a refused SET: %d %v, want %d", v, err, top+1)
		}
		top++
		for _, n := range nodes {
			if err := n.Client.Do(ctx, "SET", "k", top).Err(); err != nil {
				t.Fatalf("SET k %d through %s: %v", top, n.ID, err)
			}
			v, err := n.Client.Do(ctx, "INCR", "k").Int64()
			if err != nil || v != top+1 {
				t.Fatalf("INCR on %s after SET k %d: %d %v, want %d", n.ID, top, v, err, top+1)
			}
			top = v
		}
	})
}

// TestSetAfterRestartCountsWhatTheNodeWasGiven: a node that restarted
// cannot say which of the values it was given it issued before, so a SET
// below them is refused, naming it; above them it succeeds.
func TestSetAfterRestartCountsWhatTheNodeWasGiven(t *testing.T) {
	testproc.Long(t)
	ctx := context.Background()
	nodes := testcluster.New(t, 3, nil)
	l := nodes.WaitLeader(t)
	f := nodes.Follower(t, l)
	if v, err := f.Client.Do(ctx, "INCR", "k").Int64(); err != nil || v != 1 {
		t.Fatalf("INCR k: %d %v", v, err)
	}
	high, err := l.Client.Do(ctx, "GET", "k").Int64()
	if err != nil {
		t.Fatal(err)
	}
	f.Stop()
	f = testcluster.Start(t, f.ID, f.Dir, l, nil)
	err = l.Client.Do(ctx, "SET", "k", high-1).Err()
	if err == nil || !strings.Contains(err.Error(), f.ID) || !strings.Contains(err.Error(), "restarted") {
		t.Fatalf("SET k %d below what the restarted %s was given (%d): %v", high-1, f.ID, high, err)
	}
	if err := l.Client.Do(ctx, "SET", "k", high).Err(); err != nil {
		t.Fatalf("SET k %d: %v", high, err)
	}
	if v, err := f.Client.Do(ctx, "INCR", "k").Int64(); err != nil || v != high+1 {
		t.Fatalf("INCR on the restarted node: %d %v, want %d", v, err, high+1)
	}
}

// TestSetLoweringUnderLoad: every node issues INCR, INCRBY (above the
// segment step too) and NEXTSEG while SETs through every node lower the
// tag to just above the highest value a client has seen: no value is issued twice,
// each node's values increase, and after each acknowledged SET v no value
// <= v is issued by a request sent later.
func TestSetLoweringUnderLoad(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		seen    = map[int64]string{}
		highest int64
		floor   int64 // the last acknowledged SET
	)
	record := func(who string, first, last int64, floorAtSend int64) {
		mu.Lock()
		defer mu.Unlock()
		if first <= floorAtSend {
			t.Errorf("%s issued %d..%d, sent after SET %d was acknowledged", who, first, last, floorAtSend)
		}
		for v := first; v <= last; v++ {
			if prev, dup := seen[v]; dup {
				t.Errorf("value %d issued twice: by %s and %s", v, prev, who)
			}
			seen[v] = who
		}
		highest = max(highest, last)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range nodes {
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(i), uint64(k)))
				last := int64(0)
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					f := floor
					mu.Unlock()
					var first, l int64
					var err error
					switch r.IntN(4) {
					case 0:
						l, err = n.Client.Do(ctx, "INCR", "k").Int64()
						first = l
					case 1:
						m := int64(1 + r.IntN(300)) // the step is 100: some go direct
						l, err = n.Client.Do(ctx, "INCRBY", "k", m).Int64()
						first = l - m + 1
					default:
						var v []int64
						if v, err = n.Client.Do(ctx, "NEXTSEG", "k", 1+r.IntN(20)).Int64Slice(); err == nil {
							first, l = v[0], v[1]
						}
					}
					if err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") {
						time.Sleep(10 * time.Millisecond) // an election under load: nothing handed out
						continue
					}
					if err != nil {
						t.Errorf("%s: %v", n.ID, err)
						return
					}
					if first <= last {
						t.Errorf("%s: value %d after %d from the same node", n.ID, first, last)
					}
					last = l
					record(n.ID, first, l, f)
				}
			}()
		}
	}
	var sets, lowered, refused int
	deadline := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		via := nodes[i%3]
		high, err := via.Client.Do(ctx, "GET", "k").Int64()
		if err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") {
			time.Sleep(10 * time.Millisecond) // an election under load, as the load's
			continue
		}
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		mu.Lock()
		v := highest + 50 // above most values in flight, below what the buffers reserve
		mu.Unlock()
		err = via.Client.Do(ctx, "SET", "k", v).Err()
		switch {
		case err == nil:
			sets++
			if v < high {
				lowered++
			}
			mu.Lock()
			floor = max(floor, v)
			mu.Unlock()
		case strings.Contains(err.Error(), "values never go back"):
			refused++ // a value above v was issued meanwhile
		case strings.HasPrefix(err.Error(), "TRYAGAIN"):
			// Not acknowledged (an election under load): no floor to check.
		default:
			t.Fatalf("SET k %d: %v", v, err)
		}
		// A SET drops every allocation in flight for the tag: back to
		// back, SETs would starve the allocations (SET is an operator's
		// command, not a hot path).
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if lowered < 20 {
		t.Fatalf("only %d of %d SETs lowered the tag below its high-water: lowering was not exercised", lowered, sets+refused)
	}
	t.Logf("%d values from 3 nodes, %d SETs (%d below the high-water, %d refused: a value above had been issued meanwhile), none twice, none at or below an acknowledged SET",
		len(seen), sets, lowered, refused)
}

// TestSetAfterIdleDropNeverRepeats: a node whose buffer of a tag was
// dropped idle keeps no record of what it issued from it, so a SET counts
// everything the node was given of the tag as issued: a SET below it is
// refused, and no value ever comes back. A SET above it succeeds.
func TestSetAfterIdleDropNeverRepeats(t *testing.T) {
	testproc.Long(t)
	ctx := context.Background()
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			nodes := testcluster.New(t, size, nil)
			l := nodes.WaitLeader(t)
			n := l
			if size > 1 {
				n = nodes.Follower(t, l)
			}
			seen := testcluster.NewCollector()
			var top int64
			for range 5 {
				v, err := n.Client.Do(ctx, "INCR", "k").Int64()
				if err != nil {
					t.Fatal(err)
				}
				seen.Add(t, "k", n.ID, v, v)
				top = v
			}
			for range 2 {
				n.Node.Segments.SweepIdle()
			}
			if b := n.Node.Segments.Buffers(); b != 0 {
				t.Fatalf("%s holds %d buffers after two idle sweeps, want 0", n.ID, b)
			}
			given, err := l.Client.Do(ctx, "GET", "k").Int64()
			if err != nil {
				t.Fatal(err)
			}
			// Below what the node was given: refused, naming it.
			for _, via := range nodes {
				err := via.Client.Do(ctx, "SET", "k", top-3).Err()
				if err == nil || !strings.Contains(err.Error(), "values never go back") || !strings.Contains(err.Error(), n.ID) {
					t.Errorf("SET k %d through %s, below the values %s was given (up to %d) and issued (up to %d): %v",
						top-3, via.ID, n.ID, given, top, err)
				}
			}
			for _, via := range nodes {
				v, err := via.Client.Do(ctx, "INCR", "k").Int64()
				if err != nil {
					t.Fatal(err)
				}
				seen.Add(t, "k", via.ID, v, v)
			}
			// At what it was given: every node goes on above it.
			high, err := l.Client.Do(ctx, "GET", "k").Int64()
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Client.Do(ctx, "SET", "k", high).Err(); err != nil {
				t.Fatalf("SET k %d, the high-water: %v", high, err)
			}
			for _, via := range nodes {
				v, err := via.Client.Do(ctx, "INCR", "k").Int64()
				if err != nil || v <= high {
					t.Fatalf("INCR k through %s after SET k %d: %d %v", via.ID, high, v, err)
				}
				seen.Add(t, "k", via.ID, v, v)
			}
		})
	}
}
