package testcluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"idserver/internal/wait"
)

// Collector keeps every value handed out, per tag, and fails the test when
// one repeats; it counts the errors clients saw by their code.
type Collector struct {
	mu     sync.Mutex
	seen   map[string]map[int64]string
	errs   map[string]int
	values int
	by     map[string]int // values per node
}

// NewCollector is an empty Collector.
func NewCollector() *Collector {
	return &Collector{seen: map[string]map[int64]string{}, errs: map[string]int{}, by: map[string]int{}}
}

// Add records first..last of tag as handed out by who, failing the test
// for every value already recorded.
func (c *Collector) Add(t testing.TB, tag, who string, first, last int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[tag] == nil {
		c.seen[tag] = map[int64]string{}
	}
	for v := first; v <= last; v++ {
		if prev, dup := c.seen[tag][v]; dup {
			t.Errorf("tag %s value %d handed out twice: by %s and %s", tag, v, prev, who)
		}
		c.seen[tag][v] = who
		c.values++
		c.by[who]++
	}
}

// CountFrom is how many values who handed out.
func (c *Collector) CountFrom(who string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[who]
}

// Count is how many values were recorded.
func (c *Collector) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values
}

// Fail counts err under its code (its first word).
func (c *Collector) Fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	code := strings.SplitN(err.Error(), " ", 2)[0]
	c.errs[code]++
}

// Errors is the count of errors per code.
func (c *Collector) Errors() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.errs))
	for k, v := range c.errs {
		out[k] = v
	}
	return out
}

// Top is the highest value recorded per tag.
func (c *Collector) Top() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for tag, vals := range c.seen {
		for v := range vals {
			out[tag] = max(out[tag], v)
		}
	}
	return out
}

// WaitCount waits until more than n values are recorded, failing the test
// with what after timeout.
func (c *Collector) WaitCount(t testing.TB, timeout time.Duration, n int, what string) {
	t.Helper()
	wait.For(t, timeout, what, func() (bool, string) {
		return c.Count() > n, fmt.Sprintf("%d values, want more than %d; errors %v", c.Count(), n, c.Errors())
	})
}

// Load runs two clients per node until stop is closed: INCR, INCRBY and
// NEXTSEG on two tags, each client checking that its node's values
// increase, all of them recorded in c. A client whose node is stopped
// ends; one that gets an error counts it and tries again 10 ms later.
func Load(t testing.TB, nodes Cluster, c *Collector, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, n := range nodes {
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				tag := []string{"orders", "invoices"}[k]
				last := int64(0)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					var first, l int64
					var err error
					switch i % 3 {
					case 0:
						l, err = n.Client.Do(ctx, "INCR", tag).Int64()
						first = l
					case 1:
						l, err = n.Client.Do(ctx, "INCRBY", tag, 7).Int64()
						first = l - 6
					default:
						var v []int64
						v, err = n.Client.Do(ctx, "NEXTSEG", tag, 50).Int64Slice()
						if err == nil {
							first, l = v[0], v[1]
						}
					}
					if err != nil {
						if n.Down() {
							return
						}
						c.Fail(err)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if first <= last {
						t.Errorf("%s: %s value %d after %d from the same node", n.ID, tag, first, last)
					}
					last = l
					c.Add(t, tag, n.ID, first, l)
				}
			}()
		}
	}
	return &wg
}
