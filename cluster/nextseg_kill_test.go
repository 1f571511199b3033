package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// runs keeps every NEXTSEG run handed out, as ranges: a run of 1000 values
// a request, drawn as fast as the clients go, is too many values to keep
// one by one.
type runs struct {
	mu     sync.Mutex
	got    [][2]int64
	values int64
}

func (r *runs) add(first, last int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, [2]int64{first, last})
	r.values += last - first + 1
}

func (r *runs) count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.values
}

// NEXTSEG of 1000 values from every member of a cluster, concurrently,
// through the leader's death and its restart: no value is handed out twice,
// and each client's runs increase.
func TestNextSegUniqueAcrossALeaderKill(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	var r runs
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := int64(0)
				for {
					select {
					case <-stop:
						return
					default:
					}
					v, err := n.Client.Do(context.Background(), "NEXTSEG", "tag", 1000).Int64Slice()
					if err != nil {
						if n.Down() {
							return
						}
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if v[1]-v[0] != 999 || v[0] <= last {
						t.Errorf("%s: NEXTSEG tag 1000 = %d..%d after %d", n.ID, v[0], v[1], last)
						return
					}
					last = v[1]
					r.add(v[0], v[1])
				}
			}()
		}
	}
	waitValues := func(n int64, what string) {
		t.Helper()
		wait.For(t, 30*time.Second, what, func() (bool, string) {
			return r.count() >= n, fmt.Sprintf("%d values, want %d", r.count(), n)
		})
	}
	waitValues(2_000_000, "values before the leader dies")
	old := nodes.WaitLeader(t)
	i := slices.Index(nodes, old)
	nodes.Kill(i)
	var nl *testcluster.Node
	wait.For(t, testcluster.LeaderTimeout, "a leader other than "+old.ID, func() (bool, string) {
		nl = nodes.Leader()
		return nl != nil && nl != old, "none, or still " + old.ID
	})
	waitValues(r.count()+2_000_000, "values under the new leader")
	nodes.Restart(t, i)
	close(stop)
	wg.Wait()
	// The restarted member draws above every run before its death.
	v, err := nodes[i].Client.Do(context.Background(), "NEXTSEG", "tag", 1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	r.add(v[0], v[1])

	slices.SortFunc(r.got, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	for k := 1; k < len(r.got); k++ {
		if r.got[k][0] <= r.got[k-1][1] {
			t.Fatalf("runs %d..%d and %d..%d overlap", r.got[k-1][0], r.got[k-1][1], r.got[k][0], r.got[k][1])
		}
	}
	t.Logf("%d runs, %d values, no value twice; leader %s killed, then %s led", len(r.got), r.values, old.ID, nl.ID)
}
