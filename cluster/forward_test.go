package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testcluster"
	"idserver/internal/testproc"
)

// TestFollowerForwardsABurstOfNewTags: 200 connections to a follower of a
// healthy three-node cluster, each INCR-ing a new tag of its own and then
// a tag they all share, at once: every INCR answers an integer (the
// follower's forwards to the leader take no handshake each, so none of
// them answers TRYAGAIN), each new tag 1, and the shared tag 200 distinct
// values; the forwards share a few log entries on the leader.
func TestFollowerForwardsABurstOfNewTags(t *testing.T) {
	testproc.Long(t)
	ctx := context.Background()
	const conns = 200
	nodes := testcluster.New(t, 3, nil)
	l := nodes.WaitLeader(t)
	f := nodes.Follower(t, l)
	clients := make([]*redis.Client, conns)
	for i := range clients {
		clients[i] = redis.NewClient(&redis.Options{Addr: f.Addr, MaxRetries: -1, PoolSize: 1, MinIdleConns: 1})
		defer clients[i].Close()
		if err := clients[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		var (
			start  sync.WaitGroup
			done   sync.WaitGroup
			mu     sync.Mutex
			failed []string
			shared = map[int64]bool{}
		)
		before := l.Cluster.Status().AppliedIndex
		start.Add(1)
		for i, cl := range clients {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				tag := fmt.Sprintf("burst:%d:%d", round, i)
				v, err := cl.Incr(ctx, tag).Result()
				s, serr := cl.Incr(ctx, fmt.Sprintf("burst:shared:%d", round)).Result()
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil || v != 1:
					failed = append(failed, fmt.Sprintf("INCR %s: %d %v, want 1", tag, v, err))
				case serr != nil:
					failed = append(failed, fmt.Sprintf("INCR burst:shared:%d: %v", round, serr))
				case shared[s]:
					failed = append(failed, fmt.Sprintf("INCR burst:shared:%d answered %d twice", round, s))
				default:
					shared[s] = true
				}
			}()
		}
		start.Done()
		done.Wait()
		if len(failed) > 0 {
			t.Fatalf("round %d: %d of %d connections failed through follower %s; the first: %s", round, len(failed), conns, f.ID, failed[0])
		}
		entries := l.Cluster.Status().AppliedIndex - before
		if entries > conns/10 {
			t.Fatalf("round %d: %d new tags through follower %s took %d log entries, want at most %d (forwards batched)", round, conns, f.ID, entries, conns/10)
		}
		t.Logf("round %d: %d new tags and %d INCRs of a shared one through %s: %d log entries", round, conns, conns, f.ID, entries)
	}
}
