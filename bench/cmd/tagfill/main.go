// Command tagfill creates exactly -n distinct tags: INCR <prefix><i> for
// every i below -n, each once, over -conns connections at pipeline 1 (as
// redis-benchmark -c 50 -P 1 sends), the connections spread round-robin
// over the addresses given. redis-benchmark -r cannot do this: its
// __rand_int__ keys repeat, so it makes fewer distinct keys than requests.
// A TRYAGAIN reply (no leader for the moment) is retried after 10 ms, as a
// client does, and counted: the count is what it prints. Any other error
// reply, or a reply that is not an integer, ends it with status 1.
//
//	tagfill -addr 127.0.0.1:6379 -n 1000000 -conns 50 -prefix t:
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
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
	flag.Parse()
	list := strings.Split(*addrs, ",")
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

// fill sends INCR for the next unsent index until n are taken, one
// request in flight, and checks each reply is an integer.
func fill(addr, prefix string, n int64, next, retried *atomic.Int64) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	for {
		i := next.Add(1) - 1
		if i >= n {
			return nil
		}
		key := prefix + strconv.FormatInt(i, 10)
		for {
			fmt.Fprintf(w, "*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n", len(key), key)
			if err := w.Flush(); err != nil {
				return err
			}
			line, err := r.ReadString('\n')
			if err != nil {
				return fmt.Errorf("%s: INCR %s: %w", addr, key, err)
			}
			if line[0] == ':' {
				break
			}
			if !strings.HasPrefix(line, "-TRYAGAIN") {
				return fmt.Errorf("%s: INCR %s: %s", addr, key, strings.TrimSpace(line))
			}
			retried.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}
}
