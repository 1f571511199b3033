package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestGatherWaitsForReturningRequestsAndSkipsAfterFruitlessWaits drives
// one gather step by step: a batch waits for as many requests as the last
// one held and those queued behind it when it was handled; a wait that ends without them makes
// the next 1, then 3, batches go without waiting; a wait that gets them
// ends the skipping. Its waits are an hour long unless a step makes them
// short, so a batch that should not wait and does fails the test.
func TestGatherWaitsForReturningRequestsAndSkipsAfterFruitlessWaits(t *testing.T) {
	in, stop := make(chan *allocReq, 16), make(chan struct{})
	g := newGather(in, stop)
	g.max = time.Hour
	req := func(i int) *allocReq { return &allocReq{items: []allocItem{{Tag: fmt.Sprint(i), N: 1}}} }
	next := func(want []int, skip, backoff int, send ...int) {
		t.Helper()
		got := make(chan []int, 1)
		go func() {
			batch, _ := g.next()
			var tags []int
			for _, r := range batch {
				i, _ := strconv.Atoi(r.items[0].Tag)
				tags = append(tags, i)
			}
			got <- tags
		}()
		for _, r := range send {
			in <- req(r)
		}
		select {
		case b := <-got:
			if !slices.Equal(b, want) || g.skip != skip || g.backoff != backoff {
				t.Fatalf("batch %v, skip %d, backoff %d; want %v, %d, %d", b, g.skip, g.backoff, want, skip, backoff)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no batch within 10 s: it waited; want %v at once", want)
		}
	}

	in <- req(1)
	next([]int{1}, 0, 0)    // nothing to wait for yet
	in <- req(100)          // queued while the last batch was handled
	g.handled(1, time.Hour) // so the next waits for 1 + 1
	if g.want != 2 {
		t.Fatalf("after a batch of 1 with 1 queued, the next waits for %d requests, want 2", g.want)
	}
	next([]int{100, 101}, 0, 0, 101)

	g.handled(2, time.Hour) // the last batch held 2, none queued: the next waits for 2
	in <- req(2)
	next([]int{2, 3}, 0, 0, 3)

	g.handled(2, time.Millisecond) // a wait of 1 ms ends without the second
	in <- req(4)
	next([]int{4}, 1, 1)

	g.handled(5, time.Hour)
	in <- req(5)
	next([]int{5}, 0, 1) // skipped: no wait

	g.handled(2, time.Millisecond)
	in <- req(6)
	next([]int{6}, 3, 3) // the second fruitless wait in a row skips 3
	for i := 7; i < 10; i++ {
		g.handled(5, time.Hour)
		in <- req(i)
		next([]int{i}, 9-i, 3)
	}

	g.handled(2, time.Hour)
	in <- req(10)
	next([]int{10, 11}, 0, 0, 11) // waits again, gets them: the skipping ends

	g.handled(2, time.Millisecond)
	in <- req(12)
	next([]int{12}, 1, 1)

	close(stop)
	if b, _ := g.next(); b != nil {
		t.Fatal(fmt.Sprint("a batch after stop: ", b))
	}
}
