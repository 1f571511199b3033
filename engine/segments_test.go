package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// counterSource is a SegmentSource over one in-memory counter per tag.
type counterSource struct {
	mu    sync.Mutex
	high  map[string]int64
	calls int
	down  bool
}

func (c *counterSource) Allocate(ctx context.Context, tag string, n int64) (int64, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return 0, 0, ErrNoLeader
	}
	if c.high == nil {
		c.high = map[string]int64{}
	}
	c.calls++
	first := c.high[tag] + 1
	c.high[tag] += n
	return first, c.high[tag], nil
}

func TestSegmentsIncreaseAndPrefetch(t *testing.T) {
	src := &counterSource{}
	clock := newFakeClock()
	s := NewSegments(src, 100, clock.Now)
	ctx := context.Background()
	var last int64
	for i := range 5000 {
		n := int64(1 + i%3)
		first, l, err := s.Next(ctx, "orders", n)
		if err != nil {
			t.Fatal(err)
		}
		if first <= last || l-first+1 != n {
			t.Fatalf("got %d..%d after %d", first, l, last)
		}
		last = l
		if i%500 == 0 {
			clock.Step(10 * time.Millisecond)
		}
	}
	// The step doubled while segments went fast: far fewer calls than 10000/100.
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	if calls > 20 {
		t.Fatalf("%d source calls for 10000 values", calls)
	}
	// A large request goes straight to the source, and later values stay above it.
	first, l, err := s.Next(ctx, "orders", 1_000_000)
	if err != nil || first <= last {
		t.Fatalf("direct: %d..%d %v", first, l, err)
	}
	next, _, err := s.Next(ctx, "orders", 1)
	if err != nil || next <= l {
		t.Fatalf("after direct %d..%d, got %d (%v)", first, l, next, err)
	}
}

func TestSegmentsServeBufferThenTryAgain(t *testing.T) {
	src := &counterSource{}
	s := NewSegments(src, 1000, time.Now)
	s.wait = 200 * time.Millisecond
	ctx := context.Background()
	if _, _, err := s.Next(ctx, "t", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let a prefetch land, if any
	src.mu.Lock()
	src.down = true
	src.mu.Unlock()
	served := 1
	for {
		_, _, err := s.Next(ctx, "t", 1)
		if errors.Is(err, ErrNoLeader) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		served++
		if served > 10000 {
			t.Fatal("never ran dry")
		}
	}
	if served < 1000 {
		t.Fatalf("only %d values served from the buffer with the source down", served)
	}
}

func TestSegmentsDropBelowAfterSet(t *testing.T) {
	src := &counterSource{}
	s := NewSegments(src, 1000, time.Now)
	ctx := context.Background()
	s.Next(ctx, "t", 1)
	s.DropBelow("t", 500)
	v, _, err := s.Next(ctx, "t", 1)
	if err != nil || v <= 500 {
		t.Fatalf("after DropBelow(500): %d %v", v, err)
	}
}

func TestSegmentsConcurrentNeverRepeat(t *testing.T) {
	src := &counterSource{}
	s := NewSegments(src, 10, time.Now)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]bool{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				first, last, err := s.Next(context.Background(), "t", int64(1+i%5))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for v := first; v <= last; v++ {
					if seen[v] {
						t.Errorf("repeat %d", v)
					}
					seen[v] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
