// Command tagmem measures what tags cost: it fills -tags tags with INCR
// (50 connections, pipelined) on each server given, then reads its
// resident memory, restarts it on its directory and times the restart
// until an INCR on an existing tag answers, and reads its memory again.
// Each idserver runs alone (one node, --max-tags 0); redis-server runs with
// no persistence but the RDB that SHUTDOWN SAVE writes and the restart
// loads. It prints a markdown table.
//
//	tagmem -tags 200000 -idserver before=/tmp/idserver-main,after=./idserver -redis /usr/bin/redis-server
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	tags := flag.Int("tags", 200_000, "tags (keys) to fill")
	ids := flag.String("idserver", "", "name=binary,... of idserver builds")
	redisBin := flag.String("redis", "/usr/bin/redis-server", "redis-server binary (\"\": none)")
	clients := flag.Int("clients", 50, "connections filling at once")
	flag.BoolVar(&keep, "keep", false, "keep the data directories (their names go to stderr)")
	flag.Parse()
	fmt.Printf("| server | tags | fill s | server CPU µs per new tag | RSS after fill MiB | bytes per tag | restart until INCR answers s | RSS after restart MiB | data dir MiB |\n")
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	if *redisBin != "" {
		run("redis-server "+redisVersion(*redisBin), *tags, *clients, func(dir string, port int) []string {
			return []string{*redisBin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
		}, true)
	}
	for _, nb := range strings.Split(*ids, ",") {
		if nb == "" {
			continue
		}
		name, bin, _ := strings.Cut(nb, "=")
		run("idserver "+name, *tags, *clients, func(dir string, port int) []string {
			return []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--max-tags", "0", "--node-id", "n1"}
		}, false)
	}
}

func redisVersion(bin string) string {
	out, _ := exec.Command(bin, "--version").Output()
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return ""
}

var keep bool

func run(name string, n, clients int, args func(dir string, port int) []string, isRedis bool) {
	dir, err := os.MkdirTemp("", "tagmem-")
	check(err)
	if keep {
		fmt.Fprintln(os.Stderr, name, dir)
	} else {
		defer os.RemoveAll(dir)
	}
	port := freePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := start(args(dir, port))
	waitReady(addr)
	base := rss(p.Process.Pid)
	t0, cpu0 := time.Now(), cpuTime(p.Process.Pid)
	fill(addr, n, clients)
	fillS, fillCPU := time.Since(t0).Seconds(), cpuTime(p.Process.Pid)-cpu0
	time.Sleep(2 * time.Second)
	full := rss(p.Process.Pid)
	if isRedis {
		redis.NewClient(&redis.Options{Addr: addr}).Do(context.Background(), "SHUTDOWN", "SAVE")
	} else {
		p.Process.Signal(syscall.SIGTERM)
	}
	p.Wait()
	t0 = time.Now()
	p = start(args(dir, port))
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	for {
		if v, err := rdb.Incr(context.Background(), "tag:0").Result(); err == nil && v > 1 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	restartS := time.Since(t0).Seconds()
	time.Sleep(2 * time.Second)
	after := rss(p.Process.Pid)
	p.Process.Signal(syscall.SIGTERM)
	p.Wait()
	fmt.Printf("| %s | %d | %.1f | %.0f | %.1f | %d | %.2f | %.1f | %.1f |\n", name, n, fillS, fillCPU.Seconds()*1e6/float64(n), float64(full)/(1<<20),
		(full-base)/int64(n), restartS, float64(after)/(1<<20), float64(du(dir))/(1<<20))
}

func start(argv []string) *exec.Cmd {
	c := exec.Command(argv[0], argv[1:]...)
	check(c.Start())
	return c
}

func waitReady(addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	for rdb.Ping(context.Background()).Err() != nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// fill INCRs tag:0 .. tag:<n-1> over clients connections, in pipelines
// of 20.
func fill(addr string, n, clients int) {
	var wg sync.WaitGroup
	const pipe = 20
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, ReadTimeout: time.Minute})
			defer rdb.Close()
			for from := c * pipe; from < n; from += clients * pipe {
				for {
					p := rdb.Pipeline()
					for i := from; i < min(from+pipe, n); i++ {
						p.Incr(context.Background(), "tag:"+strconv.Itoa(i))
					}
					if _, err := p.Exec(context.Background()); err == nil {
						break
					} else if !strings.Contains(err.Error(), "TRYAGAIN") {
						check(err)
					}
				}
			}
		}()
	}
	wg.Wait()
}

func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	check(err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuTime is the user and system time of process pid.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // field 3 on
	ut, _ := strconv.ParseInt(f[11], 10, 64)                 // field 14: utime
	st, _ := strconv.ParseInt(f[12], 10, 64)                 // field 15: stime
	return time.Duration(ut+st) * time.Second / 100          // clock ticks (USER_HZ 100)
}

func du(dir string) int64 {
	out, err := exec.Command("du", "-sb", dir).Output()
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	return v
}

func freePort() int {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		check(err)
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port < 55000 { // idserver's Raft port is port+10000
			return port
		}
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "tagmem:", err)
		os.Exit(1)
	}
}
