package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestThreeProcessesSurviveLeaderKill: three idserver processes joined with
// --join, clients on all three issuing INCR, NEXTSEG and NEXTID; the leader
// is killed with SIGKILL mid-load and restarted. Every value is unique, the
// survivors elect a new leader that commits a new tag's segment and keep
// serving, and the killed node catches up, after which a SET commits.
func TestThreeProcessesSurviveLeaderKill(t *testing.T) {
	members := systest.StartMembers(t, 3)
	ctx := context.Background()
	clients := make([]*redis.Client, 3)
	for i, m := range members {
		clients[i] = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + m.Port, MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
		defer clients[i].Close()
	}
	// All three are members with distinct worker IDs.
	workers := map[string]bool{}
	for i := range members {
		var info map[string]string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if info = systest.ClusterInfo(t, clients[i]); info["members"] == "3" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d never saw 3 members: %v", i, info)
			}
		}
		if workers[info["worker_id"]] {
			t.Fatalf("node %d: worker ID %s taken twice: %v", i, info["worker_id"], info)
		}
		workers[info["worker_id"]] = true
	}

	var mu sync.Mutex
	values := map[int64]int{}
	ids := map[int64]bool{}
	errs := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				var first, last int64
				var err error
				if k%2 == 0 {
					last, err = clients[i].Do(ctx, "INCR", "orders").Int64()
					first = last
				} else {
					var v []int64
					v, err = clients[i].Do(ctx, "NEXTSEG", "orders", 25).Int64Slice()
					if err == nil {
						first, last = v[0], v[1]
					}
				}
				id, idErr := clients[i].Do(ctx, "NEXTID").Int64()
				mu.Lock()
				if err != nil {
					errs[strings.SplitN(err.Error(), " ", 2)[0]]++
				}
				for v := first; err == nil && v <= last; v++ {
					if values[v] != 0 {
						t.Errorf("value %d handed out twice (nodes %d and %d)", v, values[v]-1, i)
					}
					values[v] = i + 1
				}
				if idErr == nil {
					if ids[id] {
						t.Errorf("ID %d issued twice", id)
					}
					ids[id] = true
				}
				mu.Unlock()
				if err != nil || idErr != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(values)
	}
	wait.For(t, 20*time.Second, "values handed out before the kill", func() (bool, string) {
		return count() >= 1000, fmt.Sprint(count(), " values")
	})
	leaderAddr, err := clients[1].Do(ctx, "CLUSTER", "LEADER").Text()
	if err != nil {
		t.Fatal(err)
	}
	var killed *systest.Member
	for _, m := range members {
		if strings.HasSuffix(leaderAddr, ":"+m.Port) {
			killed = m
		}
	}
	if killed == nil {
		t.Fatalf("leader %q is none of the members", leaderAddr)
	}
	killed.P.Kill()
	atKill := count()
	// The survivors elect a leader among themselves, which commits the
	// first segment of a new tag: values served from the survivors'
	// buffers alone would not show that the cluster recovered.
	var leader int
	for deadline := time.Now().Add(20 * time.Second); leader == 0; time.Sleep(50 * time.Millisecond) {
		roles := map[string]string{}
		for i, m := range members {
			if m != killed {
				info := systest.ClusterInfo(t, clients[i])
				roles[m.Port] = info["role"]
				if info["role"] == "Leader" {
					leader = i + 1
				}
			}
		}
		if leader == 0 && time.Now().After(deadline) {
			t.Fatalf("no survivor elected leader within 20s of the leader's kill: roles %v", roles)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := clients[leader-1].Do(ctx, "NEXTSEG", "after-the-kill", 10).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NEXTSEG of a new tag on the new leader (%s) after the kill: %v", members[leader-1].Port, err)
		}
	}
	wait.For(t, 20*time.Second, "values handed out after the leader died", func() (bool, string) {
		return count() >= atKill+1000, fmt.Sprintf("%d at the kill, %d now", atKill, count())
	})
	afterKill := count()
	killed.Start(t)
	// SET waits for every member: it succeeds once the killed node is back.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := clients[leader-1].Do(ctx, "SET", "after-the-kill", 1000).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET on the new leader (%s) with the killed node back: %v", members[leader-1].Port, err)
		}
	}
	wait.For(t, 20*time.Second, "values handed out with the killed node back", func() (bool, string) {
		return count() >= afterKill+1000, fmt.Sprintf("%d when it started, %d now", afterKill, count())
	})
	close(stop)
	wg.Wait()
	// The restarted node catches up: its state machine reaches the index
	// the others have applied.
	want := 0
	for i, m := range members {
		if m != killed {
			n, _ := strconv.Atoi(systest.ClusterInfo(t, clients[i])["applied_index"])
			want = max(want, n)
		}
	}
	for i, m := range members {
		if m != killed {
			continue
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			got, _ := strconv.Atoi(systest.ClusterInfo(t, clients[i])["applied_index"])
			if got >= want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("restarted node applied up to %d, the others %d", got, want)
			}
		}
	}
	t.Logf("3 processes, leader %s killed with SIGKILL and restarted: %d values and %d IDs, no repeat; errors %v",
		killed.Port, len(values), len(ids), errs)
}

// TestIncrLoadCausesFewRaftApplies: redis-benchmark -P 32 INCR against one
// node; the adaptive step keeps Raft applies to a handful per million.
func TestIncrLoadCausesFewRaftApplies(t *testing.T) {
	bench := testproc.Need(t, "redis-benchmark")
	p := systest.StartProc(t, t.TempDir())
	rdb := p.Client()
	applies := func() int {
		n, _ := strconv.Atoi(systest.ClusterInfo(t, rdb)["raft_applies_proposed"])
		return n
	}
	before := applies()
	start := time.Now()
	out, err := exec.Command(bench, "-p", p.Port, "-c", "50", "-P", "32", "-n", "2000000", "INCR", "counter").CombinedOutput()
	elapsed := time.Since(start)
	if err != nil || !strings.Contains(string(out), "requests per second") {
		t.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	n := applies() - before
	last, err := rdb.Do(context.Background(), "INCR", "counter").Int64()
	if err != nil || last <= 2000000 {
		t.Fatalf("INCR after 2M: %d %v", last, err)
	}
	rps := regexp.MustCompile(`([0-9.]+) requests per second`).FindStringSubmatch(string(out))
	t.Logf("2,000,000 INCR at pipeline 32 (%s req/s): %d Raft applies in %v (%.1f/s)", rps[1], n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	if n > 40 {
		t.Fatalf("%d Raft applies for 2M INCRs; the adaptive step should keep it to about 12", n)
	}
}

// TestMemberRestartsOnANewRaftAddress: a member that comes back with a
// different --raft-addr cannot be reached by the leader until it tells the
// cluster; it does so through the other members' RESP ports and rejoins.
func TestMemberRestartsOnANewRaftAddress(t *testing.T) {
	members := systest.StartMembers(t, 3)
	ctx := context.Background()
	moved := members[2]
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + moved.Port, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); systest.ClusterInfo(t, c)["members"] != "3"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the third member never saw 3 members")
		}
	}
	moved.P.Shutdown()
	moved.Raft = strconv.Itoa(testproc.FreePort(t))
	moved.Start(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info := systest.ClusterInfo(t, c)
		if info["role"] == "Follower" && info["leader"] != "" && strings.HasSuffix(info["raft_addr"], ":"+moved.Raft) {
			if _, err := c.Do(ctx, "INCR", "orders").Int64(); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member on a new Raft address did not rejoin: %v", info)
		}
	}
}
