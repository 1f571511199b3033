package idclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStrictIDsAcrossAFreshWorker: a Strict client takes IDs while the
// server's clock is 3 h ahead; the clock comes back, and the server takes
// a fresh worker ID whose IDs start from the real clock, below every ID
// handed out. The client drops them for strictRestartAfter (a failover
// to a node a little behind would be over by then), then reports
// ErrOrderRestarted once and hands out increasing IDs from the new start;
// no ID is handed out twice.
func TestStrictIDsAcrossAFreshWorker(t *testing.T) {
	srv := startServer(t, "", "--enable-debug-command")
	ctl := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer ctl.Close()
	ctx := context.Background()
	if err := ctl.Do(ctx, "DEBUG", "CLOCK", 3*3600_000).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, Buffer: Buffer{Strict: true, Batch: 100, FixedBatch: true}})
	seen := map[int64]bool{}
	var last int64
	for deadline := time.Now().Add(3 * time.Second); len(seen) < 1000; {
		id, err := c.Next(ctx)
		if err != nil && time.Now().Before(deadline) {
			continue // TRYAGAIN until the lease is renewed past the step forward
		} else if err != nil {
			t.Fatal(err)
		}
		if id <= last || seen[id] {
			t.Fatalf("%d after %d", id, last)
		}
		seen[id], last = true, id
	}
	if err := ctl.Do(ctx, "DEBUG", "CLOCK", 0).Err(); err != nil {
		t.Fatal(err)
	}
	stepped := time.Now()
	restarted := false
	for range 1000 {
		id, err := c.Next(ctx)
		switch {
		case errors.Is(err, ErrOrderRestarted) && !restarted:
			restarted = true
			t.Logf("ErrOrderRestarted %v after the clock came back", time.Since(stepped).Round(time.Millisecond))
			if time.Since(stepped) < strictRestartAfter {
				t.Fatalf("order restarted after %v", time.Since(stepped))
			}
			last = 0
			continue
		case err != nil && time.Since(stepped) < time.Second:
			continue // CLOCKBACK until the server has its fresh worker ID
		case err != nil:
			t.Fatalf("after the step back: %v", err)
		case seen[id] || id <= last:
			t.Fatalf("%d after %d (restarted %v)", id, last, restarted)
		}
		seen[id], last = true, id
	}
	if !restarted {
		t.Fatal("no ErrOrderRestarted after the server's order restarted")
	}
}
