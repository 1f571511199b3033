package cluster

// Process tests of "never a duplicate, whatever the operator does": each
// starts real idserver processes on loopback and makes one of the mistakes
// an operator makes in the first week.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	"idserver/node"
)

// TestJoinForgottenOnFirstStartIsRefused: a node started once on
// its own (the --join forgotten) holds a one-node cluster; started again
// with --join, it is refused with both cluster IDs and the remedy, and the
// cluster is unchanged. Started on an empty directory it joins, and the two
// nodes' IDs never meet.
func TestJoinForgottenOnFirstStartIsRefused(t *testing.T) {
	a := systest.StartProc(t, t.TempDir())
	ca := a.Client()
	idA := systest.ClusterInfo(t, ca)["cluster_id"]
	dirB := t.TempDir()
	b := systest.StartProc(t, dirB)
	idB := systest.ClusterInfo(t, b.Client())["cluster_id"]
	if idA == "" || idB == "" || idA == idB {
		t.Fatalf("cluster IDs %q and %q", idA, idB)
	}
	b.Shutdown()
	p, err := systest.Launch(t, dirB, nil, "--join", a.Addr)
	log := systest.WaitExit(t, p, err)
	for _, want := range []string{idA, idB, "empty --dir"} {
		if !strings.Contains(log, want) {
			t.Errorf("the refusal does not name %q:\n%s", want, log)
		}
	}
	if info := systest.ClusterInfo(t, ca); info["members"] != "1" {
		t.Fatalf("a refused join changed the cluster: %v", info)
	}
	b2 := systest.StartProc(t, t.TempDir(), "--join", a.Addr)
	if w := systest.ClusterInfo(t, b2.Client())["worker_id"]; w == systest.ClusterInfo(t, ca)["worker_id"] {
		t.Fatalf("the joiner got worker %s, the same as the first node", w)
	}
	n := systest.CollectIDs(t, 2*time.Second, ca, b2.Client())
	t.Logf("refused a one-node cluster's directory at --join; after a clean join %d IDs from 2 nodes, no repeat", n)
}

// TestJoinerWithAnotherLayoutIsRefused: a joiner with another layout is refused.
func TestJoinerWithAnotherLayoutIsRefused(t *testing.T) {
	a := systest.StartProc(t, t.TempDir())
	p, err := systest.Launch(t, t.TempDir(), nil, "--join", a.Addr, "--worker-bits", "9", "--seq-bits", "13")
	log := systest.WaitExit(t, p, err)
	if !strings.Contains(log, "worker-bits=9") || !strings.Contains(log, "worker-bits=10") {
		t.Fatalf("the refusal does not name both layouts:\n%s", log)
	}
	if info := systest.ClusterInfo(t, a.Client()); info["members"] != "1" {
		t.Fatalf("a refused join changed the cluster: %v", info)
	}
}

// TestBogusJoinChangesNothing: a client's CLUSTER JOIN naming an
// address where no idserver answers is refused and leaves the cluster as
// it was, across a restart; node-to-node requests are not on the RESP port.
func TestBogusJoinChangesNothing(t *testing.T) {
	dir := t.TempDir()
	a := systest.StartProc(t, dir)
	c := a.Client()
	ctx := context.Background()
	err := c.Do(ctx, "CLUSTER", "JOIN", "bogus", "127.0.0.1:1", "127.0.0.1:2").Err()
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("bogus join: %v", err)
	}
	for _, cmd := range [][]any{{"CLUSTER", "ALLOC", "t", 5}, {"CLUSTER", "HIGHWATER", "x", 5}} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "unknown subcommand") {
			t.Fatalf("%v answered a client: %v", cmd, err)
		}
	}
	check := func() {
		if err := c.Do(ctx, "INCR", "t").Err(); err != nil {
			t.Fatalf("INCR: %v", err)
		}
		high, err := c.Do(ctx, "GET", "t").Int64()
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		if err := c.Do(ctx, "SET", "t", high+1000).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		if info := systest.ClusterInfo(t, c); info["members"] != "1" || info["role"] != "Leader" {
			t.Fatalf("after a bogus join: %v", info)
		}
	}
	check()
	a.Shutdown()
	a = systest.StartProc(t, dir)
	c = a.Client()
	check()
}

// TestSaturationIsNotClockBack: demand beyond the layout waits for
// the clock; it never answers CLOCKBACK on a healthy clock.
func TestSaturationIsNotClockBack(t *testing.T) {
	a := systest.StartProc(t, t.TempDir())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: a.Addr, ReadTimeout: 30 * time.Second})
			defer c.Close()
			for range 3 {
				if err := c.Do(context.Background(), "GENEID", 42, 10000).Err(); err != nil {
					t.Errorf("GENEID 42 10000: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	bench := testproc.Need(t, "redis-benchmark")
	out, err := exec.Command(bench, "-p", a.Port, "-c", "8", "-n", "2000", "NEXTID", "10000").CombinedOutput()
	if err != nil || strings.Contains(string(out), "CLOCKBACK") || strings.Contains(string(out), "ERR") {
		t.Fatalf("redis-benchmark NEXTID 10000: %v\n%s", err, out)
	}
}

// TestEpochInTheFutureRefused: an --epoch in the future is refused at start.
func TestEpochInTheFutureRefused(t *testing.T) {
	dir := t.TempDir()
	code, out := systest.RunToExit(t, "--dir", dir, "--port", systest.FreePort(t), "--epoch", "2030-01-01T00:00:00Z")
	if code != 2 || !strings.Contains(out, "future") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// 2^35 ms is about 398 days: an epoch 100 days ago leaves under a year.
	epoch := time.Now().UTC().AddDate(0, 0, -100).Truncate(time.Second).Format(time.RFC3339)
	code, out = systest.RunToExit(t, "--dir", dir, "--port", systest.FreePort(t), "--epoch", epoch, "--time-bits", "35", "--worker-bits", "10", "--seq-bits", "18")
	if code != 2 || !strings.Contains(out, "year") {
		t.Fatalf("an epoch leaving no time bits: exit %d:\n%s", code, out)
	}
}

// TestThreeMachines deploys three nodes as on three machines: each binds
// its own address (127.0.0.1, .2, .3, which all reach loopback), on the
// same ports, and advertises it. CLUSTER LEADER names a reachable address,
// and every node serves.
func TestThreeMachines(t *testing.T) {
	port, raftPort := testproc.FreePort(t), testproc.FreePort(t)
	var procs []*systest.Proc
	for i := 1; i <= 3; i++ {
		host := fmt.Sprintf("127.0.0.%d", i)
		args := []string{"--bind", host, "--port", strconv.Itoa(port), "--raft-addr", fmt.Sprintf("%s:%d", host, raftPort)}
		if i > 1 {
			args = append(args, "--join", fmt.Sprintf("127.0.0.1:%d", port))
		}
		p, err := systest.Launch(t, t.TempDir(), nil, args...) // the later --port wins over launch's --port 0
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	var clients []*redis.Client
	for _, p := range procs {
		c := p.Client()
		leader, err := c.Do(context.Background(), "CLUSTER", "LEADER").Text()
		if err != nil || leader != fmt.Sprintf("127.0.0.1:%d", port) {
			t.Fatalf("CLUSTER LEADER on %s: %q %v", p.Addr, leader, err)
		}
		if err := c.Do(context.Background(), "INCR", "orders").Err(); err != nil {
			t.Fatalf("INCR on %s: %v", p.Addr, err)
		}
		clients = append(clients, c)
	}
	n := systest.CollectIDs(t, time.Second, clients...)
	t.Logf("3 nodes on 127.0.0.1-3, same ports: %d IDs, no repeat", n)
}

// TestQuorumLostForGood: two of three members are lost for good; the
// survivor, restarted with --recover, serves alone above everything the
// lost members could have issued, and a new node joins it.
func TestQuorumLostForGood(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	ctx := context.Background()
	seen := map[int64]bool{}
	var top int64
	for _, m := range ms {
		c := m.P.Client()
		for range 50 {
			v, err := c.Do(ctx, "INCR", "orders").Int64()
			if err != nil {
				t.Fatal(err)
			}
			top = max(top, v)
		}
		ids, err := c.Do(ctx, "NEXTID", 1000).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			seen[id] = true
		}
	}
	ms[1].P.Kill()
	ms[2].P.Kill()
	ms[0].P.Shutdown()
	p, err := systest.Launch(t, ms[0].Dir, nil, "--port", ms[0].Port, "--raft-addr", "127.0.0.1:"+ms[0].Raft, "--recover")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Client()
	v, err := c.Do(ctx, "INCR", "orders").Int64()
	if err != nil || v <= top+1_000_000_000_000-1 {
		t.Fatalf("INCR after --recover: %d %v (lost members reached %d)", v, err, top)
	}
	if info := systest.ClusterInfo(t, c); info["members"] != "1" || info["role"] != "Leader" {
		t.Fatalf("after --recover: %v", info)
	}
	n := systest.StartProc(t, t.TempDir(), "--join", p.Addr)
	for _, q := range []*systest.Proc{p, n} {
		ids, err := q.Client().Do(ctx, "NEXTID", 1000).Int64Slice()
		if err != nil {
			t.Fatalf("NEXTID after recovery on %s: %v", q.Addr, err)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d issued again after recovery", id)
			}
			seen[id] = true
		}
	}
}

// TestSetWithAMemberPaused (processes): a member paused with
// SIGSTOP cannot confirm a SET, so SET answers an error naming it instead
// of OK; after SIGCONT the retried SET answers OK and that member's next
// value is above the floor.
func TestSetWithAMemberPaused(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	ctx := context.Background()
	c1, c3 := ms[0].P.Client(), ms[2].P.Client()
	if err := c3.Do(ctx, "INCR", "s").Err(); err != nil {
		t.Fatal(err)
	}
	id3 := systest.ClusterInfo(t, c3)["node_id"]
	high, err := c1.Do(ctx, "GET", "s").Int64()
	if err != nil {
		t.Fatal(err)
	}
	v := high + 1000
	if err := ms[2].P.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is sent, not yet taken: one thread takes it and stops the
	// others, which run on until then (milliseconds on a loaded machine,
	// enough to answer the SET). Wait until the kernel says every thread
	// is stopped (state T), so that the SET meets the member paused.
	tasks := fmt.Sprintf("/proc/%d/task", ms[2].P.Cmd.Process.Pid)
	wait.For(t, 10*time.Second, "every thread of the member stopped", func() (bool, string) {
		ids, err := os.ReadDir(tasks)
		if err != nil {
			return false, err.Error()
		}
		for _, id := range ids {
			b, err := os.ReadFile(filepath.Join(tasks, id.Name(), "stat"))
			if err != nil {
				return false, err.Error()
			}
			if _, after, _ := strings.Cut(string(b), ") "); !strings.HasPrefix(after, "T") {
				return false, "thread " + id.Name() + " in state " + after[:min(1, len(after))]
			}
		}
		return true, ""
	})
	err = c1.Do(ctx, "SET", "s", v).Err()
	ms[2].P.Cmd.Process.Signal(syscall.SIGCONT)
	if err == nil || !strings.Contains(err.Error(), id3) {
		t.Fatalf("SET with %s paused: %v, want an error naming it", id3, err)
	}
	wait.For(t, 20*time.Second, "SET retried after SIGCONT", func() (bool, string) {
		err := c1.Do(ctx, "SET", "s", v).Err()
		return err == nil, fmt.Sprint(err)
	})
	if got, err := c3.Do(ctx, "INCR", "s").Int64(); err != nil || got <= v {
		t.Fatalf("INCR on the resumed member after SET %d: %d %v", v, got, err)
	}
}

// TestWipedMemberWithoutJoinStops (the replaced disk, started without
// --join): it bootstraps a cluster of its own, but when its old cluster's
// members reach for it at its Raft address it stops issuing and exits.
func TestWipedMemberWithoutJoinStops(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	victim := ms[2]
	id := systest.ClusterInfo(t, victim.P.Client())["node_id"]
	victim.P.Kill()
	p, _ := systest.Launch(t, t.TempDir(), nil, "--port", victim.Port, "--raft-addr", "127.0.0.1:"+victim.Raft, "--node-id", id)
	select {
	case <-p.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("a wiped member started without --join kept running:\n%s", p.Log())
	}
	if p.Err() == nil || !strings.Contains(p.Log(), "CLUSTER FORGET") {
		t.Fatalf("exit %v:\n%s", p.Err(), p.Log())
	}
}

// TestWipedMemberWithNewIDWithoutJoinStops: the same with a new node ID (a
// pod rescheduled with a fresh volume and a generated ID, started without
// --join). Its old cluster's Raft streams name the old member, not this
// node, and they must still make it stop: running on, it would issue
// worker 0's IDs and a tag's first values again beside the live cluster.
func TestWipedMemberWithNewIDWithoutJoinStops(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	victim := ms[2]
	victim.P.Kill()
	p, _ := systest.Launch(t, t.TempDir(), nil, "--port", victim.Port, "--raft-addr", "127.0.0.1:"+victim.Raft)
	select {
	case <-p.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("a new node at a dead member's address, started without --join, kept running:\n%s", p.Log())
	}
	if p.Err() == nil || !strings.Contains(p.Log(), "CLUSTER FORGET") {
		t.Fatalf("exit %v:\n%s", p.Err(), p.Log())
	}
}

// TestClusterJoinCannotMoveTheLeader: a client's CLUSTER JOIN naming the
// leader's own node ID with a Raft address where nothing answers must be
// refused and change nothing. Were the leader's Raft address rewritten in
// the state machine (the leader answers its own identity without dialing the
// address), after the next leader change every SET would fail dialing that
// address, and autopilot would remove the live, healthy node as dead.
func TestClusterJoinCannotMoveTheLeader(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	ctx := context.Background()
	info := systest.ClusterInfo(t, ms[1].P.Client())
	leaderID, leaderRESP := info["leader_id"], info["leader"]
	bogus := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	err := ms[1].P.Client().Do(ctx, "CLUSTER", "JOIN", leaderID, bogus, leaderRESP).Err()
	for _, m := range ms {
		for k, v := range systest.ClusterInfo(t, m.P.Client()) {
			if strings.HasPrefix(k, "member") && strings.Contains(v, "id="+leaderID+",") && strings.Contains(v, "raft="+bogus+",") {
				t.Fatalf("CLUSTER JOIN %s %s %s (answered %v) moved the leader's Raft address on %s: %s", leaderID, bogus, leaderRESP, err, m.P.Addr, v)
			}
		}
	}
	if err == nil {
		t.Fatalf("CLUSTER JOIN %s %s %s: accepted", leaderID, bogus, leaderRESP)
	}
}

// TestRefusedJoinsLeaveNoStrayVoter: with every worker ID held, joins are
// refused before the configuration changes, so two of them do not take a
// healthy cluster down.
func TestRefusedJoinsLeaveNoStrayVoter(t *testing.T) {
	layout := []string{"--worker-bits", "1", "--seq-bits", "21"}
	a := systest.StartProc(t, t.TempDir(), layout...)
	b := systest.StartProc(t, t.TempDir(), append(layout, "--join", a.Addr)...)
	for range 2 {
		p, err := systest.Launch(t, t.TempDir(), nil, append(layout, "--join", a.Addr)...)
		if log := systest.WaitExit(t, p, err); !strings.Contains(log, "no free worker ID") {
			t.Fatalf("a third node with 2 worker IDs:\n%s", log)
		}
	}
	// A stray voter would cost the quorum once the leader counts it: INCR
	// goes on being served on both nodes for two seconds.
	ca, cb := redis.NewClient(&redis.Options{Addr: a.Addr}), redis.NewClient(&redis.Options{Addr: b.Addr})
	defer ca.Close()
	defer cb.Close()
	wait.Holds(t, 2*time.Second, "INCR served after refused joins", func() (bool, string) {
		for _, c := range []*redis.Client{ca, cb} {
			if err := c.Do(context.Background(), "INCR", "t").Err(); err != nil {
				return false, fmt.Sprintf("%s: %v", c.Options().Addr, err)
			}
		}
		return true, ""
	})
	for _, p := range []*systest.Proc{a, b} {
		c := p.Client()
		if err := c.Do(context.Background(), "INCR", "t").Err(); err != nil {
			t.Fatalf("INCR on %s after refused joins: %v", p.Addr, err)
		}
		if info := systest.ClusterInfo(t, c); info["members"] != "2" {
			t.Fatalf("after refused joins: %v", info)
		}
	}
}

// TestReadmeClusterStartsBackToBack: the three commands of
// docs/operations.md (A cluster) started at once; the joiners wait while
// the first node answers LOADING.
func TestReadmeClusterStartsBackToBack(t *testing.T) {
	port := testproc.FreePort(t)
	first := fmt.Sprintf("127.0.0.1:%d", port)
	type started struct {
		p   *systest.Proc
		err error
	}
	done := make(chan started, 3)
	for i, args := range [][]string{{"--port", strconv.Itoa(port)}, {"--join", first}, {"--join", first}} {
		dir := t.TempDir()
		go func() {
			if i > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			p, err := systest.Launch(t, dir, nil, args...)
			done <- started{p, err}
		}()
	}
	for range 3 {
		s := <-done
		if s.err != nil {
			t.Fatal(s.err)
		}
		if err := s.p.Client().Do(context.Background(), "INCR", "orders").Err(); err != nil {
			t.Fatalf("INCR on %s: %v", s.p.Addr, err)
		}
	}
}

// TestCopiedMemberIsRefused: a member's data directory copied while it runs
// and started elsewhere with --join is refused: the original still answers.
func TestCopiedMemberIsRefused(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", ms[2].Dir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	p, err := systest.Launch(t, copyDir, nil, "--join", "127.0.0.1:"+ms[0].Port)
	if log := systest.WaitExit(t, p, err); !strings.Contains(log, "still answers") {
		t.Fatalf("the copy's refusal:\n%s", log)
	}
	if err := ms[2].P.Client().Do(context.Background(), "NEXTID").Err(); err != nil {
		t.Fatalf("the original after its copy was refused: %v", err)
	}
}

// waitMembers waits until p's state machine shows n members of cluster id
// (a joiner's is behind the leader's for a moment).
func waitMembers(t *testing.T, p *systest.Proc, id string, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info := systest.ClusterInfo(t, p.Client())
		if info["cluster_id"] == id && info["members"] == strconv.Itoa(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node at %s: %v, want cluster %s of %d members", p.Addr, info, id, n)
		}
	}
}

// TestRecoverRefusedWhileMembersAnswer: --recover on a
// member while the other two run is refused, naming them and the remedy,
// before anything changes: started again without the flag, the node is
// the same member of the same three-node cluster, and every ID is unique.
// With one of the two still running it is refused naming that one; once
// both are killed it recovers.
func TestRecoverRefusedWhileMembersAnswer(t *testing.T) {
	ms := systest.StartMembers(t, 3)
	before := systest.ClusterInfo(t, ms[1].P.Client())
	for _, m := range ms {
		waitMembers(t, m.P, before["cluster_id"], 3)
	}
	args := []string{"--port", ms[0].Port, "--raft-addr", "127.0.0.1:" + ms[0].Raft, "--recover"}
	refused := func(alive ...*systest.Member) {
		t.Helper()
		p, err := systest.Launch(t, ms[0].Dir, nil, args...)
		log := systest.WaitExit(t, p, err)
		want := []string{"answer as members of cluster " + before["cluster_id"], "without --recover", "stop them for good first"}
		for _, m := range alive {
			want = append(want, "at 127.0.0.1:"+m.Raft)
		}
		for _, w := range want {
			if !strings.Contains(log, w) {
				t.Errorf("the refusal does not say %q:\n%s", w, log)
			}
		}
		if strings.Contains(log, "recovered the cluster alone") {
			t.Fatalf("it recovered:\n%s", log)
		}
	}
	ms[0].P.Shutdown()
	refused(ms[1], ms[2])
	ms[0].Start(t)
	for _, m := range ms {
		waitMembers(t, m.P, before["cluster_id"], 3)
	}
	systest.CollectIDs(t, time.Second, ms[0].P.Client(), ms[1].P.Client(), ms[2].P.Client())

	ms[2].P.Kill()
	ms[0].P.Shutdown()
	refused(ms[1])
	ms[1].P.Kill()
	p, err := systest.Launch(t, ms[0].Dir, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	if info := systest.ClusterInfo(t, p.Client()); info["members"] != "1" || info["cluster_id"] == before["cluster_id"] {
		t.Fatalf("--recover with the others killed: %v", info)
	}
}

// TestRecoverRunsOnce: after a recovery, a restart with --recover still on
// the command line does not recover again: with a member that joined the
// recovered node since alive, it is refused naming that member, which stays
// a member; the next start without the flag serves with no second skip. A
// node alone in the cluster it recovered ignores the flag, loudly, and does
// not skip; a single node recovers once, then ignores it.
func TestRecoverRunsOnce(t *testing.T) {
	ctx := context.Background()
	ms := systest.StartMembers(t, 3)
	c := ms[0].P.Client()
	if err := c.Do(ctx, "INCR", "orders").Err(); err != nil {
		t.Fatal(err)
	}
	ms[1].P.Kill()
	ms[2].P.Kill()
	ms[0].P.Shutdown()
	args := []string{"--port", ms[0].Port, "--raft-addr", "127.0.0.1:" + ms[0].Raft}
	p, err := systest.Launch(t, ms[0].Dir, nil, append(args, "--recover")...)
	if err != nil {
		t.Fatal(err)
	}
	recovered, err := p.Client().Do(ctx, "INCR", "orders").Int64()
	if err != nil || recovered < 1_000_000_000_000 {
		t.Fatalf("INCR after --recover: %d %v", recovered, err)
	}
	id := systest.ClusterInfo(t, p.Client())["cluster_id"]
	// Alone after the recovery: the flag is ignored, loudly.
	p.Shutdown()
	p, err = systest.Launch(t, ms[0].Dir, nil, append(args, "--recover")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Log(), "--recover IGNORED") || !strings.Contains(p.Log(), "recovered_from=") {
		t.Fatalf("no loud message for a second --recover alone:\n%s", p.Log())
	}
	if v, err := p.Client().Do(ctx, "INCR", "orders").Int64(); err != nil || v > recovered+1_000_000 || systest.ClusterInfo(t, p.Client())["cluster_id"] != id {
		t.Fatalf("a second --recover alone: INCR %d %v (after the recovery %d), cluster %v (was %s)", v, err, recovered,
			systest.ClusterInfo(t, p.Client())["cluster_id"], id)
	} else {
		recovered = v
	}
	joiner := &systest.Member{Dir: t.TempDir(), Port: strconv.Itoa(testproc.FreePort(t)), Raft: strconv.Itoa(testproc.FreePort(t)), Join: p.Addr}
	joiner.Start(t)
	waitMembers(t, p, id, 2)
	p.Shutdown()

	p, err = systest.Launch(t, ms[0].Dir, nil, append(args, "--recover")...)
	log := systest.WaitExit(t, p, err)
	if !strings.Contains(log, "127.0.0.1:"+joiner.Raft) || !strings.Contains(log, "without --recover") {
		t.Fatalf("the second --recover does not name the member that joined:\n%s", log)
	}
	p, err = systest.Launch(t, ms[0].Dir, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []*systest.Proc{p, joiner.P} {
		waitMembers(t, q, id, 2)
	}
	v, err := p.Client().Do(ctx, "INCR", "orders").Int64()
	if err != nil || v <= recovered || v > recovered+1_000_000 {
		t.Fatalf("INCR after the refused second --recover: %d %v (after the recovery: %d): skipped again", v, err, recovered)
	}
	systest.CollectIDs(t, time.Second, p.Client(), joiner.P.Client())

	// A single node: its first --recover recovers (the skip is what makes
	// a directory restored from a backup safe), the second one is ignored.
	dir := t.TempDir()
	one := systest.StartProc(t, dir)
	first, err := one.Client().Do(ctx, "INCR", "orders").Int64()
	if err != nil {
		t.Fatal(err)
	}
	one.Shutdown()
	one = systest.StartProc(t, dir, "--recover")
	v, err = one.Client().Do(ctx, "INCR", "orders").Int64()
	if err != nil || v < first+1_000_000_000_000 {
		t.Fatalf("a single node's first --recover: INCR %d %v (before %d)", v, err, first)
	}
	oneID := systest.ClusterInfo(t, one.Client())["cluster_id"]
	one.Shutdown()
	one = systest.StartProc(t, dir, "--recover")
	if !strings.Contains(one.Log(), "--recover IGNORED") {
		t.Fatalf("no loud message for a second --recover:\n%s", one.Log())
	}
	if w, err := one.Client().Do(ctx, "INCR", "orders").Int64(); err != nil || w > v+1_000_000 || systest.ClusterInfo(t, one.Client())["cluster_id"] != oneID {
		t.Fatalf("a single node's second --recover: INCR %d %v (after the first %d), cluster %v (was %s)", w, err, v,
			systest.ClusterInfo(t, one.Client())["cluster_id"], oneID)
	}
}

// TestRemovedNodeWithoutJoinJoinsAgainThroughItsPeers: the node that
// bootstrapped the cluster (started without --join) is forgotten while it
// is down. Started again the same way, it must not bootstrap a cluster of
// its own on its emptied directory: it joins again through the members it
// knew, and no ID repeats.
func TestRemovedNodeWithoutJoinJoinsAgainThroughItsPeers(t *testing.T) {
	members := systest.StartMembers(t, 3)
	// Joined again, the node takes its old worker ID back and starts above
	// that worker's last lease end, seconds ahead of the clock: drawn at the
	// layout's full rate, its NEXTID soon waits for the clock (demand
	// outran the layout), longer than go-redis's 3 s read timeout.
	clients := make([]*redis.Client, 3)
	for i, m := range members {
		clients[i] = redis.NewClient(&redis.Options{Addr: m.P.Addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
		t.Cleanup(func() { clients[i].Close() })
	}
	first := systest.ClusterInfo(t, clients[0])
	ctx := context.Background()
	// What it issued before: the node that joins again must repeat none.
	before := map[int64]bool{}
	nextIDs := func(c *redis.Client, d time.Duration, each func(int64)) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			ids, err := c.Do(ctx, "NEXTID", 1000).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				each(id)
			}
		}
	}
	nextIDs(clients[0], 500*time.Millisecond, func(id int64) { before[id] = true })
	members[0].P.Kill()
	wait.For(t, 20*time.Second, "CLUSTER FORGET "+first["node_id"], func() (bool, string) {
		err := clients[1].Do(ctx, "CLUSTER", "FORGET", first["node_id"]).Err()
		return err == nil, fmt.Sprint(err)
	})
	members[0].Start(t) // no --join, as at its first start
	again := systest.ClusterInfo(t, clients[0])
	switch {
	case again["node_id"] != first["node_id"]:
		t.Fatalf("it came back as node %s, not %s", again["node_id"], first["node_id"])
	case again["cluster_id"] != first["cluster_id"]:
		t.Fatalf("it came back in cluster %s, not %s: a cluster of its own", again["cluster_id"], first["cluster_id"])
	case !strings.Contains(members[0].P.Log(), "joining again as a new member"):
		t.Fatalf("it did not say it joins again:\n%s", members[0].P.Log())
	}
	after := 0
	nextIDs(clients[0], time.Second, func(id int64) {
		if before[id] {
			t.Fatalf("ID %d issued before the node was forgotten and again after it joined again", id)
		}
		after++
	})
	n := systest.CollectIDs(t, time.Second, clients...)
	t.Logf("forgotten while down, started again without --join: joined cluster %s again as worker %s (was %s) through its peers; "+
		"%d IDs before and %d after from it, none twice; %d IDs from the three, no repeat", again["cluster_id"], again["worker_id"],
		first["worker_id"], len(before), after, n)
}

// TestRemovedNodeWhoseRejoinDidNotFinishStartsNoClusterOfItsOwn: a node
// without --join, removed while down, whose directory was moved aside but
// whose rejoin did not finish (refused: no free worker ID; no answer; killed)
// is restarted as before. On its emptied directory it must not bootstrap a
// cluster of its own (INCR would answer 1 again, worker 0 beside the
// cluster's worker 0); it must refuse, or, with the members it knew recorded by the
// move, join its cluster again through them.
func TestRemovedNodeWhoseRejoinDidNotFinishStartsNoClusterOfItsOwn(t *testing.T) {
	members := systest.StartMembers(t, 3)
	ctx := context.Background()
	first := systest.ClusterInfo(t, members[0].P.Client())
	if v, err := members[0].P.Client().Do(ctx, "INCR", "orders").Int64(); err != nil || v != 1 {
		t.Fatalf("INCR orders: %d %v", v, err)
	}
	members[0].P.Kill()
	c1 := members[1].P.Client()
	wait.For(t, 20*time.Second, "CLUSTER FORGET "+first["node_id"], func() (bool, string) {
		err := c1.Do(ctx, "CLUSTER", "FORGET", first["node_id"]).Err()
		return err == nil, fmt.Sprint(err)
	})
	// What a start refused as removed leaves when its rejoin then fails.
	if _, err := node.MoveAside(node.Config{Dir: members[0].Dir}); err != nil {
		t.Fatal(err)
	}
	out := refusal(t, members[0].Dir, "--port", members[0].Port, "--raft-addr", "127.0.0.1:"+members[0].Raft)
	if strings.Contains(out, "bootstrapped a new cluster") {
		t.Fatalf("it started a cluster of its own:\n%s", out)
	}
	mustSay(t, out, "moved aside", "--join")
	// The move as the start refused as removed makes it records the members
	// it knew: with that note, a start without --join joins through them.
	if _, err := node.MoveAside(node.Config{Dir: members[0].Dir, NodeID: first["node_id"], Join: "127.0.0.1:" + members[1].Port}); err != nil {
		t.Fatal(err)
	}
	members[0].Start(t)
	mustSay(t, members[0].P.Log(), "joining through the members it knew")
	again := systest.ClusterInfo(t, members[0].P.Client())
	if again["cluster_id"] != first["cluster_id"] {
		t.Fatalf("through the members it knew it came back in cluster %s, not %s", again["cluster_id"], first["cluster_id"])
	}
	if v, err := members[0].P.Client().Do(ctx, "INCR", "orders").Int64(); err != nil || v <= 1 {
		t.Fatalf("INCR orders after it joined again: %d %v, want above 1", v, err)
	}
}
