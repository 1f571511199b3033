// Command connmem measures what an idle client connection costs a server
// in resident memory: it opens N connections to the server, each sending
// one PING and reading its reply (a connection that has been served once,
// then idles), reads the server's RSS, closes them all, and reads the RSS
// again once the server counts them gone (INFO connected_clients) and
// after a settle time. It prints one line:
//
//	held_kib_per_conn kept_kib_per_conn_at_once kept_kib_per_conn_settled rss_before_mib
//
// held is (RSS with N open - RSS before) / N; kept is (RSS after the close -
// RSS before) / N, read as soon as the server shows them gone and again
// after -settle. The server must take N+1 connections (--maxclients).
//
//	connmem -port 6379 -pid $(pidof redis-server) -n 10000
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	port := flag.Int("port", 0, "the server's port on 127.0.0.1")
	pid := flag.Int("pid", 0, "the server's process ID, for its RSS")
	n := flag.Int("n", 10000, "connections")
	settle := flag.Duration("settle", 5*time.Second, "how long after the close the second RSS reading waits")
	flag.Parse()
	if err := run(*port, *pid, *n, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "connmem:", err)
		os.Exit(1)
	}
}

func run(port, pid, n int, settle time.Duration) error {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	info, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer info.Close()
	ir := bufio.NewReader(info)
	base, err := clients(info, ir)
	if err != nil {
		return err
	}
	before, err := rss(pid)
	if err != nil {
		return err
	}
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	const workers = 50
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 64)
			for i := w; i < n; i += workers {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					_, err = c.Write([]byte("PING\r\n"))
				}
				if err == nil {
					var k int
					k, err = c.Read(buf)
					if err == nil && !bytes.HasPrefix(buf[:k], []byte("+PONG")) {
						err = fmt.Errorf("PING answered %q", buf[:k])
					}
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("connection %d: %w", i, err):
					default:
					}
					if c != nil {
						c.Close()
					}
					return
				}
				conns[i] = c
			}
		}(w)
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := waitClients(info, ir, base+n); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the last goroutines park
	held, err := rss(pid)
	if err != nil {
		return err
	}
	for _, c := range conns {
		c.Close()
	}
	if err := waitClients(info, ir, base); err != nil {
		return err
	}
	keptAtOnce, err := rss(pid)
	if err != nil {
		return err
	}
	time.Sleep(settle)
	keptSettled, err := rss(pid)
	if err != nil {
		return err
	}
	per := func(after int64) float64 { return float64(after-before) / float64(n) / 1024 }
	fmt.Printf("%.2f %.2f %.2f %.1f\n", per(held), per(keptAtOnce), per(keptSettled), float64(before)/(1<<20))
	return nil
}

// clients is INFO's connected_clients.
func clients(c net.Conn, r *bufio.Reader) (int, error) {
	if _, err := c.Write([]byte("INFO clients\r\n")); err != nil {
		return 0, err
	}
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil {
		return 0, fmt.Errorf("INFO answered %q", head)
	}
	body := make([]byte, size+2)
	if _, err := ioReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no connected_clients in INFO")
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := r.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// waitClients waits until the server counts want connections, at most 60 s.
func waitClients(c net.Conn, r *bufio.Reader, want int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := clients(c, r)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server counts %d connections, not %d", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rss is the process's resident memory in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for process %d", pid)
}
