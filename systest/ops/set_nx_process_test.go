package ops

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
)

// TestSetNXAcrossThreeProcesses: "seed the counter if absent" sent at once
// to every node of a three-process cluster (followers forward it to the
// leader) creates each tag exactly once, and every node then issues above
// the winning seed.
func TestSetNXAcrossThreeProcesses(t *testing.T) {
	members := systest.StartMembers(t, 3)
	ctx := context.Background()
	clients := make([]*redis.Client, 3)
	for i, m := range members {
		clients[i] = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + m.Port, MaxRetries: -1})
		defer clients[i].Close()
		for deadline := time.Now().Add(10 * time.Second); systest.ClusterInfo(t, clients[i])["members"] != "3"; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node %d never saw 3 members", i)
			}
		}
	}
	for round := range 10 {
		tag := fmt.Sprintf("orders-%d", round)
		var wg sync.WaitGroup
		replies := make([]string, 9)
		for i := range replies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Seeds differ, so the reply of GET tells which SET won.
				err := clients[i%3].SetArgs(ctx, tag, 1000000+i, redis.SetArgs{Mode: "NX"}).Err()
				switch {
				case err == nil:
					replies[i] = "OK"
				case err == redis.Nil:
					replies[i] = "nil"
				default:
					replies[i] = err.Error()
				}
			}()
		}
		wg.Wait()
		winner := -1
		for i, r := range replies {
			switch r {
			case "OK":
				if winner >= 0 {
					t.Fatalf("round %d: SET NX succeeded twice: %v", round, replies)
				}
				winner = i
			case "nil":
			default:
				t.Fatalf("round %d: SET NX answered %q", round, r)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no SET NX succeeded: %v", round, replies)
		}
		seed := int64(1000000 + winner)
		for i, c := range clients {
			if got, err := c.Get(ctx, tag).Result(); err != nil || got != strconv.FormatInt(seed, 10) {
				t.Fatalf("round %d: GET on node %d: %q %v, want the winner's %d", round, i, got, err, seed)
			}
		}
		for i, c := range clients {
			if v, err := c.Incr(ctx, tag).Result(); err != nil || v <= seed {
				t.Fatalf("round %d: INCR on node %d after the seed %d: %d %v", round, i, seed, v, err)
			}
		}
	}
}
