// Command tagfill creates exactly -n distinct tags: INCR <prefix><i> for
// every i below -n, each once, over -conns connections at pipeline 1 (as
// redis-benchmark -c 50 -P 1 sends), the connections spread round-robin
// over the addresses given. redis-benchmark -r cannot do this: its
// __rand_int__ keys repeat, so it makes fewer distinct keys than requests.
// A TRYAGAIN reply (no leader for the moment) is retried after 10 ms, as a
// client does, and counted: the count is what it prints. Any other error
// reply, or a reply that is not an integer, ends it with status 1.
//
// With -rate, the INCRs go out open-loop instead: each at its own time,
// -rate a second on average (Poisson), on an idle connection of the
// -conns dialed first, or on a new one when none is idle; it then prints
// the retries and the INCRs' latency (p50, p90, p99), each from its send.
//
//	tagfill -addr 127.0.0.1:6379 -n 1000000 -conns 50 -prefix t:
//	tagfill -addr 127.0.0.1:6379 -n 3000 -rate 1000 -prefix o:
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addrs := flag.String("addr", "127.0.0.1:6380", "RESP addresses, comma-separated")
	n := flag.Int("n", 1000000, "how many tags")
	conns := flag.Int("conns", 50, "how many connections")
	prefix := flag.String("prefix", "t:", "the tags' common prefix")
	rate := flag.Float64("rate", 0, "INCRs a second, sent open-loop (0: each connection sends its next once answered)")
	flag.Parse()
	list := strings.Split(*addrs, ",")
	if *rate > 0 {
		if err := openLoop(list, *prefix, *n, *conns, *rate); err != nil {
			fmt.Fprintln(os.Stderr, "tagfill:", err)
			os.Exit(1)
		}
		return
	}
	var next, retried atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *conns)
	for c := 0; c < *conns; c++ {
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			if err := fill(addr, *prefix, int64(*n), &next, &retried); err != nil {
				errs <- err
			}
		}(list[c%len(list)])
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fmt.Fprintln(os.Stderr, "tagfill:", err)
		os.Exit(1)
	}
	fmt.Println(retried.Load())
}

// openLoop sends n INCRs at Poisson times, rate a second, each on an idle
// connection (conns dialed first, more when none is idle), and prints the
// retries and the latency percentiles.
func openLoop(addrs []string, prefix string, n, conns int, rate float64) error {
	idle := make(chan *client, n+conns)
	for i := range conns {
		c, err := dialClient(addrs[i%len(addrs)])
		if err != nil {
			return err
		}
		idle <- c
	}
	var retried atomic.Int64
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	at := time.Now()
	for i := range n {
		at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		time.Sleep(time.Until(at))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *client
			select {
			case c = <-idle:
			default:
				var err error
				if c, err = dialClient(addrs[i%len(addrs)]); err != nil {
					errs <- err
					return
				}
			}
			t0 := time.Now()
			if err := c.incr(prefix+strconv.Itoa(i), &retried); err != nil {
				errs <- err
				return
			}
			lat[i] = time.Since(t0)
			idle <- c
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	slices.Sort(lat)
	p := func(q float64) float64 { return float64(lat[int(q*float64(n-1))].Microseconds()) / 1000 }
	fmt.Printf("%d retried, latency ms: p50 %.3f p90 %.3f p99 %.3f\n", retried.Load(), p(0.5), p(0.9), p(0.99))
	return nil
}

// client is one connection that sends an INCR and reads its reply.
type client struct {
	addr string
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func dialClient(addr string) (*client, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &client{addr, conn, bufio.NewReader(conn), bufio.NewWriter(conn)}, nil
}

// incr sends INCR key until it answers an integer: a TRYAGAIN reply is
// retried after 10 ms and counted, any other reply is an error.
func (c *client) incr(key string, retried *atomic.Int64) error {
	for {
		fmt.Fprintf(c.w, "*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n", len(key), key)
		if err := c.w.Flush(); err != nil {
			return err
		}
		line, err := c.r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("%s: INCR %s: %w", c.addr, key, err)
		}
		if line[0] == ':' {
			return nil
		}
		if !strings.HasPrefix(line, "-TRYAGAIN") {
			return fmt.Errorf("%s: INCR %s: %s", c.addr, key, strings.TrimSpace(line))
		}
		retried.Add(1)
		time.Sleep(10 * time.Millisecond)
	}
}

// fill sends INCR for the next unsent index until n are taken, one
// request in flight, and checks each reply is an integer.
func fill(addr, prefix string, n int64, next, retried *atomic.Int64) error {
	c, err := dialClient(addr)
	if err != nil {
		return err
	}
	defer c.conn.Close()
	for {
		i := next.Add(1) - 1
		if i >= n {
			return nil
		}
		if err := c.incr(prefix+strconv.FormatInt(i, 10), retried); err != nil {
			return err
		}
	}
}
