package node

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/engine"
	"idserver/internal/testproc"
)

// openTestNode starts a one-node cluster in dir on ports from FreePort.
func openTestNode(t *testing.T, dir string) *Node {
	t.Helper()
	port := testproc.FreePort(t)
	n, err := Open(context.Background(), Config{
		Bind: "127.0.0.1", Port: port, RaftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)),
		Dir: dir, Layout: engine.DefaultLayout(), Window: 3 * time.Second, MaxBorrow: time.Second, SegmentStep: 100, Version: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCloseWaitsForCommandsInFlight: Close while clients pipeline CLUSTER
// BACKUP (which reads Pebble) and INCR (which refills segments from Raft)
// returns once they are done: no command touches a closed store (Pebble
// panics on that) or a closed cluster. Run it with -race too.
func TestCloseWaitsForCommandsInFlight(t *testing.T) {
	for round := 0; round < 3; round++ {
		n := openTestNode(t, t.TempDir())
		ctx := context.Background()
		opened := time.Now()
		defer func() { t.Logf("round %d took %v", round, time.Since(opened).Round(time.Millisecond)) }()
		seed := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		for i := 0; i < 50; i++ {
			if err := seed.Incr(ctx, fmt.Sprintf("tag%d", i)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		seed.Close()
		var wg sync.WaitGroup
		busy := make(chan struct{}, 8)
		for c := 0; c < 8; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rdb := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, PoolSize: 1, ReadTimeout: time.Minute})
				defer rdb.Close()
				signalled := false
				defer func() {
					if !signalled {
						busy <- struct{}{}
					}
				}()
				for sent := 0; ; sent++ {
					pipe := rdb.Pipeline()
					for i := 0; i < 50; i++ {
						if c%2 == 0 {
							pipe.Do(ctx, "CLUSTER", "BACKUP")
						} else {
							pipe.Incr(ctx, fmt.Sprintf("tag%d-%d", c, i))
						}
					}
					if _, err := pipe.Exec(ctx); err != nil {
						if sent == 0 {
							t.Errorf("client %d before Close: %v", c, err)
						}
						return // the node closed the connection
					}
					if sent == 0 {
						busy <- struct{}{}
						signalled = true
					}
				}
			}()
		}
		for c := 0; c < 8; c++ {
			<-busy
		}
		closing := time.Now()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("Close took %v", time.Since(closing).Round(time.Millisecond))
		wg.Wait()
	}
}
