package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/chaos/lazyfs"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestSlowLeaderDisk starts three real processes, each with its --dir on a
// lazyfs of its own, puts them under NEXTID and INCR load, and then delays
// every fsync of the leader's disk by 2 s. The leader must say so in its
// log and hand its leadership to another node within handoffBound, and
// the two healthy nodes must keep answering: every NEXTID (their worker
// leases ride out the slow leader), and INCR but for at most one in a
// hundred (a buffer that runs dry before the new leader refills it).
func TestSlowLeaderDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow leader disk takes about half a minute; not in -short")
	}
	if err := lazyfs.Available(); err != nil {
		t.Skip("a slow disk needs a lazyfs mount (apt-get install fuse3, run as root): " + err.Error())
	}
	const (
		syncDelay    = 2 * time.Second
		handoffBound = 15 * time.Second
		after        = 500 // replies each healthy node answers once another node leads
	)
	bin, remove, err := testproc.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)

	type member struct {
		fs   *lazyfs.FS
		srv  *testproc.Server
		rdb  *redis.Client
		port string
	}
	members := make([]*member, 3)
	for i := range members {
		mnt := filepath.Join(t.TempDir(), "disk")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := lazyfs.Mount(mnt, lazyfs.Options{Capacity: diskSizeBytes})
		if err != nil {
			t.Fatal(err)
		}
		m := &member{fs: f, port: strconv.Itoa(testproc.FreePort(t))}
		members[i] = m
		t.Cleanup(func() {
			f.SetSyncDelay(0) // lets the process's last syncs end at once
			if m.srv != nil {
				m.srv.Kill()
			}
			if err := f.Unmount(); err != nil {
				t.Errorf("unmount %s: %v", mnt, err)
			}
		})
		args := []string{"--port", m.port, "--raft-addr", "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))}
		if i > 0 {
			args = append(args, "--join", "127.0.0.1:"+members[0].port)
		}
		m.srv, err = testproc.Start(t, testproc.Config{Binary: bin, Dir: filepath.Join(mnt, "data"), Args: args, Ready: []any{"NEXTID"}})
		if err != nil {
			t.Fatal(err)
		}
		m.rdb = redis.NewClient(&redis.Options{Addr: m.srv.Addr, MaxRetries: -1, ReadTimeout: 20 * time.Second})
		t.Cleanup(func() { m.rdb.Close() })
	}
	ctx := context.Background()
	leaderOf := func(m *member) int {
		addr, err := m.rdb.Do(ctx, "CLUSTER", "LEADER").Text()
		if err != nil {
			return -1
		}
		for i, o := range members {
			if o.srv.Addr == addr {
				return i
			}
		}
		return -1
	}
	leader := -1
	wait.For(t, 20*time.Second, "a leader all three agree on", func() (bool, string) {
		leader = leaderOf(members[0])
		return leader >= 0 && leaderOf(members[1]) == leader && leaderOf(members[2]) == leader, "they disagree"
	})

	// Load on every node, each reply's outcome counted per node, from the
	// moment the disk turns slow.
	var slowSince atomic.Int64 // UnixNano; 0 before the delay is set
	var warm atomic.Int64      // replies before it
	type tally struct {
		ok, failed, incrFailed atomic.Int64
		mu                     sync.Mutex
		firstErr               string
	}
	tallies := make([]*tally, len(members))
	stop := make(chan struct{})
	var load sync.WaitGroup
	for i, m := range members {
		tallies[i] = &tally{}
		for w := range 4 {
			load.Add(1)
			go func() {
				defer load.Done()
				rdb := redis.NewClient(&redis.Options{Addr: m.srv.Addr, MaxRetries: -1, ReadTimeout: 20 * time.Second})
				defer rdb.Close()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					var err error
					if n%2 == 0 {
						err = rdb.Do(ctx, "NEXTID").Err()
					} else {
						err = rdb.Do(ctx, "INCR", fmt.Sprintf("t%d", w)).Err()
					}
					if slowSince.Load() == 0 {
						warm.Add(1)
						continue
					}
					tl := tallies[i]
					if err == nil {
						tl.ok.Add(1)
						continue
					}
					if n%2 == 1 {
						tl.incrFailed.Add(1)
					}
					if tl.failed.Add(1) == 1 {
						tl.mu.Lock()
						tl.firstErr = fmt.Sprintf("%v after the disk turned slow: %v", time.Since(time.Unix(0, slowSince.Load())).Round(time.Millisecond), err)
						tl.mu.Unlock()
					}
				}
			}()
		}
	}
	stopLoad := sync.OnceFunc(func() { close(stop); load.Wait() })
	t.Cleanup(stopLoad)

	// Let the load run a moment, then slow the leader's disk.
	wait.For(t, 10*time.Second, "1000 replies before the disk turns slow", func() (bool, string) {
		return warm.Load() >= 1000, fmt.Sprint(warm.Load())
	})
	members[leader].fs.SetSyncDelay(syncDelay)
	start := time.Now()
	slowSince.Store(start.UnixNano())
	t.Logf("every fsync of node %d (%s, the leader) now waits %v", leader, members[leader].srv.Addr, syncDelay)

	var handedTo int
	var tookOver time.Duration
	for {
		healthy := members[(leader+1)%3]
		if handedTo = leaderOf(healthy); handedTo >= 0 && handedTo != leader {
			tookOver = time.Since(start)
			break
		}
		if time.Since(start) > handoffBound {
			stopLoad()
			t.Fatalf("node %d still leads (or no leader) %v after its disk turned slow", leader, handoffBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("node %d leads %v after the leader's disk turned slow", handedTo, tookOver.Round(time.Millisecond))
	var base [3]int64
	for i, tl := range tallies {
		base[i] = tl.ok.Load()
	}
	if _, ok := wait.Until(20*time.Second, func() (bool, string) {
		for i, tl := range tallies {
			if i != leader && tl.ok.Load()-base[i] < after {
				return false, ""
			}
		}
		return true, ""
	}); !ok {
		t.Errorf("the healthy nodes did not answer %d replies each within 20s of the handoff", after)
	}
	stopLoad()

	for i, tl := range tallies {
		role := "healthy"
		if i == leader {
			role = "slow"
		}
		t.Logf("node %d (%s): %d replies, %d errors after the disk turned slow (the first: %s)", i, role, tl.ok.Load(), tl.failed.Load(), tl.firstErr)
		if i == leader {
			continue
		}
		if n := tl.failed.Load() - tl.incrFailed.Load(); n > 0 {
			t.Errorf("healthy node %d answered %d NEXTID errors while the leader's disk was slow; the first error %s", i, n, tl.firstErr)
		}
		if n := tl.incrFailed.Load(); n*100 > tl.ok.Load()/2 {
			t.Errorf("healthy node %d answered %d INCR errors in about %d INCRs while the leader's disk was slow; the first error %s", i, n, tl.ok.Load()/2, tl.firstErr)
		}
		if tl.ok.Load() == 0 {
			t.Errorf("healthy node %d answered nothing while the leader's disk was slow", i)
		}
	}
	log := members[leader].srv.Log()
	if !strings.Contains(log, "slow disk: ") || !strings.Contains(log, "level=WARN") {
		t.Errorf("the slow node's log has no slow disk warning:\n%s", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "slow disk") {
			t.Log(line)
		}
	}
}
