package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/cluster"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	idnode "idserver/node"
)

// cutOnRaft cuts its node off when the first Raft stream reaches it: a
// joiner that dies (to its peers) just as the leader starts to replicate to
// it, before it has caught up.
type cutOnRaft struct {
	*testcluster.CutStream
	once sync.Once
	cut  chan struct{}
}

// peekedConn gives back the bytes Accept read to look at the stream.
type peekedConn struct {
	net.Conn
	peeked []byte
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.peeked) > 0 {
		n := copy(p, c.peeked)
		c.peeked = c.peeked[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (s *cutOnRaft) Accept() (net.Conn, error) {
	for {
		c, err := s.CutStream.Accept()
		if err != nil {
			return nil, err
		}
		// The handshake's hello opens with its version, then the kind.
		var b [2]byte
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b[:]); err != nil {
			c.Close()
			continue
		}
		c.SetReadDeadline(time.Time{})
		if b[1] == 'R' {
			s.once.Do(func() {
				s.Partition(true)
				close(s.cut)
			})
		}
		if s.CutStream.IsCut() {
			c.Close()
			continue
		}
		return &peekedConn{Conn: c, peeked: b[:]}, nil
	}
}

// TestJoinerCutOffMidJoinKeepsTheQuorum: with one of three voters down, a
// joiner that vanishes as soon as the leader starts replicating to it must
// not take the majority away. It enters as a non-voter, so the two live
// voters still commit; once it is back and caught up it is promoted, and
// then it counts: with it, two of the three voters left carry on.
func TestJoinerCutOffMidJoinKeepsTheQuorum(t *testing.T) {
	testproc.Long(t)
	logs := &testproc.Buffer{}
	withLog := func(c *idnode.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) }
	n1, err := testcluster.Open(t, "n1", t.TempDir(), nil, withLog)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := testcluster.Open(t, "n2", t.TempDir(), n1, withLog)
	if err != nil {
		t.Fatal(err)
	}
	n3, err := testcluster.Open(t, "n3", t.TempDir(), n1, withLog)
	if err != nil {
		t.Fatal(err)
	}
	nodes := testcluster.Cluster{n1, n2, n3}
	ctx := context.Background()
	n3.Stop() // two of three voters left: a majority, no more

	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	joinerStream := &cutOnRaft{CutStream: &testcluster.CutStream{Listener: rl}, cut: make(chan struct{})}
	joined := make(chan error, 1)
	var n4 *testcluster.Node
	go func() {
		var err error
		n4, err = testcluster.Open(t, "n4", t.TempDir(), nodes.WaitLeader(t), func(c *idnode.Config) {
			withLog(c)
			c.RaftAddr, c.Network = rl.Addr().String(), joinerStream
		})
		joined <- err
	}()
	select {
	case <-joinerStream.cut:
	case err := <-joined:
		t.Fatalf("the joiner finished without the leader ever replicating to it: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the leader never opened a Raft stream to the joiner")
	}
	// The joiner is gone to its peers. The two live voters still commit
	// (a new tag forces an allocation through Raft), and the joiner became
	// a member all the same.
	commits := func(tag string) func() (bool, string) {
		return func() (bool, string) {
			_, err := n1.Client.Do(ctx, "NEXTSEG", tag, 10).Int64Slice()
			return err == nil, fmt.Sprintf("%v\n%s", err, logs)
		}
	}
	wait.For(t, 15*time.Second, "a commit with a joiner cut off mid-join and one voter down", commits("after-cut"))
	wait.For(t, 10*time.Second, "the joiner is a member", func() (bool, string) {
		info, _ := n1.Client.Do(ctx, "CLUSTER", "INFO").Text()
		return strings.Contains(info, "n4=") && strings.Contains(info, "\r\nraft_suffrage:voter\r\n"), info
	})
	if err := nodes.Follower(t, nodes.WaitLeader(t)).Client.Do(ctx, "CLUSTER", "FORGET", "n3").Err(); err != nil {
		t.Fatalf("FORGET n3: %v", err)
	}

	// Back and caught up, the joiner is promoted by the leader.
	joinerStream.Partition(false)
	if err := <-joined; err != nil {
		t.Fatalf("the joiner did not finish its start once back: %v", err)
	}
	nodes = append(nodes, n4)
	wait.For(t, 20*time.Second, "n4 is promoted", func() (bool, string) {
		info, _ := n4.Client.Do(ctx, "CLUSTER", "INFO").Text()
		return strings.Contains(info, "\r\nraft_suffrage:voter\r\n"), info + "\n" + logs.String()
	})
	// Voters n1, n2, n4: stopping n2 leaves a majority with n4 in it.
	n2.Stop()
	wait.For(t, 20*time.Second, "a commit by n1 and the promoted n4", commits("after-promotion"))
	if _, err := n4.Client.Do(ctx, "INCR", "on-n4").Int64(); err != nil {
		t.Fatalf("INCR on the promoted joiner: %v", err)
	}
}

// TestRemovedCutOffNodeStopsAtItsLeaseEnd: a member cut off from the others
// with values in its segment buffers is removed (FORGET, as autopilot's
// removal does; it cannot be told). It hands out its buffered values only
// until its lease ends, and a SET on the others waits for that end before
// it answers: no value at or below the acknowledged SET comes out of it.
func TestRemovedCutOffNodeStopsAtItsLeaseEnd(t *testing.T) {
	testproc.Long(t)
	lease := func(c *idnode.Config) { c.WorkerLease = 2 * time.Second }
	n1, err := testcluster.Open(t, "n1", t.TempDir(), nil, lease)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := testcluster.Open(t, "n2", t.TempDir(), n1, lease)
	if err != nil {
		t.Fatal(err)
	}
	n3, err := testcluster.Open(t, "n3", t.TempDir(), n1, lease)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 5 {
		if err := n3.Client.Do(ctx, "INCR", "cut").Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the spare segment lands
	n3.Stream.Partition(true)
	// n3 may have led: the other two elect a leader first (a FORGET may
	// meet the change of leadership; it is retried, as an operator would).
	var l *testcluster.Node
	wait.For(t, 15*time.Second, "FORGET n3", func() (bool, string) {
		l = (testcluster.Cluster{n1, n2}).WaitLeader(t)
		err := l.Client.Do(ctx, "CLUSTER", "FORGET", "n3").Err()
		return err == nil, fmt.Sprint(err)
	})
	// n3 does not know; it serves from its buffers until its lease ends.
	var fromN3 []int64
	stopped := make(chan time.Time, 1)
	var why error
	go func() {
		// Slowly enough that the buffers (two segments of 100) last the
		// whole 10 s: only the lease end can stop it.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(60 * time.Millisecond) {
			v, err := n3.Client.Do(ctx, "INCR", "cut").Int64()
			if err != nil {
				why = err
				stopped <- time.Now()
				return
			}
			fromN3 = append(fromN3, v)
		}
		stopped <- time.Time{}
	}()
	high, err := l.Client.Do(ctx, "GET", "cut").Int64()
	if err != nil {
		t.Fatal(err)
	}
	setAt := time.Now()
	// The SET waits up to the lease (2 s) and the clock skew allowed (1 s):
	// longer than go-redis's default read timeout.
	patient := redis.NewClient(&redis.Options{Addr: l.Addr, MaxRetries: -1, ReadTimeout: 20 * time.Second})
	defer patient.Close()
	if err := patient.Do(ctx, "SET", "cut", high+10).Err(); err != nil {
		t.Fatalf("SET after the removal: %v", err)
	}
	acked := time.Now()
	end := <-stopped
	if end.IsZero() {
		t.Fatalf("the removed, cut-off node kept handing out buffered values for 10 s (%d of them)", len(fromN3))
	}
	if !strings.Contains(why.Error(), "worker lease ended") {
		t.Fatalf("the removed node stopped with %v, want its lease end", why)
	}
	if end.After(acked) {
		t.Fatalf("the SET was acknowledged at %v, before the removed node stopped at %v", acked.Sub(setAt), end.Sub(setAt))
	}
	if v, err := n3.Client.Do(ctx, "INCR", "cut").Int64(); err == nil {
		t.Fatalf("the removed node handed out %d after the SET of %d was acknowledged", v, high+10)
	}
	t.Logf("removed while cut off: %d buffered values handed out, then TRYAGAIN; the SET waited %v for its lease to end",
		len(fromN3), acked.Sub(setAt).Round(time.Millisecond))
}

// TestDeadMemberRemovedAcrossLeadershipChanges: a member stopped for good
// is removed after DeadMemberAfter even when the leadership changes more
// often than that (a loaded machine, a flaky leader): each new leader
// counts the silence the one before saw, not a full delay of its own from
// its first day. Here the leader is cut off every few seconds, so no
// leadership lasts DeadMemberAfter.
func TestDeadMemberRemovedAcrossLeadershipChanges(t *testing.T) {
	testproc.Long(t)
	mod := func(c *idnode.Config) { c.WorkerLease, c.DeadMemberAfter, c.Voters = 2*time.Second, 6*time.Second, 3 }
	nodes := testcluster.New(t, 4, mod)
	ctx := context.Background()
	dead := nodes[3]
	if l := nodes.WaitLeader(t); l == dead {
		dead = nodes[2]
	}
	dead.Stop()
	var live testcluster.Cluster
	for _, n := range nodes {
		if n != dead {
			live = append(live, n)
		}
	}
	removed := func() bool {
		for _, n := range live {
			info, err := n.Client.Do(ctx, "CLUSTER", "INFO").Text()
			if err == nil && strings.Contains(info, "role:Leader") {
				return !strings.Contains(info, "id="+dead.ID+",")
			}
		}
		return false
	}
	began := time.Now()
	changes := 0
	for time.Since(began) < 45*time.Second {
		// Let a leader lead for 4 s (less than DeadMemberAfter), then
		// cut it off until another one leads.
		for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if removed() {
				t.Logf("%s removed %v after it stopped, across %d changes of leadership", dead.ID, time.Since(began).Round(100*time.Millisecond), changes)
				return
			}
		}
		l := live.WaitLeader(t)
		l.Stream.Partition(true)
		var others testcluster.Cluster
		for _, n := range live {
			if n != l {
				others = append(others, n)
			}
		}
		others.WaitLeader(t)
		l.Stream.Partition(false)
		changes++
	}
	t.Fatalf("%s, stopped for good, is still a member after %v and %d changes of leadership (DeadMemberAfter 6 s)", dead.ID, time.Since(began).Round(time.Second), changes)
}

// TestDeadMemberKeptAtTheFloorSaysWhy: three members, one stopped for good.
// Removing it would leave two members that can vote, below the floor of
// three, so autopilot keeps it, which it does without a word: the leader
// says so once (per leadership), and why, so that an operator knows to
// replace the node.
func TestDeadMemberKeptAtTheFloorSaysWhy(t *testing.T) {
	testproc.Long(t)
	logs := &testproc.Buffer{}
	mod := func(c *idnode.Config) {
		c.WorkerLease, c.DeadMemberAfter, c.Voters = 2*time.Second, 2*time.Second, 3
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	nodes := testcluster.New(t, 3, mod)
	dead := nodes[2]
	if nodes.WaitLeader(t) == dead {
		dead = nodes[1]
	}
	dead.Stop()
	var kept string
	wait.For(t, 30*time.Second, "a \"dead member kept\" line for "+dead.ID, func() (bool, string) {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `msg="dead member kept"`) && strings.Contains(line, "node="+dead.ID) {
				kept = line
				return true, ""
			}
		}
		return false, logs.String()
	})
	if !strings.Contains(kept, "would leave 2 members that can vote, fewer than 3") {
		t.Fatalf("the reason is not the floor: %s", kept)
	}
	// Over three more seconds of autopilot the line is not repeated within
	// a leadership, and the member stays.
	wait.Holds(t, 3*time.Second, "one \"dead member kept\" line per leadership", func() (bool, string) {
		kept, led := strings.Count(logs.String(), `msg="dead member kept"`), strings.Count(logs.String(), `msg="autopilot started"`)
		return kept <= led, fmt.Sprintf("logged %d times in %d leaderships", kept, led)
	})
	for _, n := range nodes {
		if n != dead && n.Cluster.IsLeader() {
			if info, err := n.Client.Do(context.Background(), "CLUSTER", "INFO").Text(); err != nil || !strings.Contains(info, "id="+dead.ID+",") {
				t.Fatalf("%s no longer a member (err %v):\n%s", dead.ID, err, info)
			}
		}
	}
}

// commandCalls is the calls= count of cmd in n's INFO commandstats, 0 when
// n answered none.
func commandCalls(t *testing.T, n *testcluster.Node, cmd string) string {
	t.Helper()
	info, err := n.Client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats on %s: %v", n.ID, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":"); ok {
			calls, _, _ := strings.Cut(rest, ",")
			return strings.TrimPrefix(calls, "calls=")
		}
	}
	return "0"
}

// TestJoinGoesOverTheRaftPort: a joiner reads a member's INFO cluster on
// its RESP port (join_via:raft, raft_addr) and sends the join on the Raft
// port, to the leader or to a follower that sends it on: no member answers
// a CLUSTER command on its RESP port, and both joiners are members.
func TestJoinGoesOverTheRaftPort(t *testing.T) {
	testproc.Long(t)
	n1 := testcluster.Start(t, "n1", t.TempDir(), nil, nil)
	n2 := testcluster.Start(t, "n2", t.TempDir(), n1, nil) // through the leader
	if n2.Cluster.IsLeader() {
		t.Fatal("n2 leads a cluster it joined")
	}
	n3 := testcluster.Start(t, "n3", t.TempDir(), n2, nil) // through a follower
	for _, n := range []*testcluster.Node{n1, n2} {
		if calls := commandCalls(t, n, "cluster"); calls != "0" {
			t.Errorf("%s answered %s CLUSTER commands on its RESP port: a join went there, not to its Raft port", n.ID, calls)
		}
	}
	info, err := n1.Client.Do(context.Background(), "CLUSTER", "INFO").Text()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"n2=", "n3=", "\r\njoin_via:raft\r\n", "\r\nraft_addr:" + n1.Cluster.RaftAddr() + "\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("n1's CLUSTER INFO has no %q:\n%s", want, info)
		}
	}
	if w, ok := n3.Cluster.Worker(); !ok || w < 0 {
		t.Errorf("n3 holds no worker ID (%d, %v)", w, ok)
	}
}

// TestJoinWithAnotherSecretIsRefusedAtTheRaftPort: a joiner that does not
// know the cluster secret is refused at the member's Raft port, before it
// sends its join: a refusal (the start ends at once) that says so, and the
// member's RESP port never sees the join.
func TestJoinWithAnotherSecretIsRefusedAtTheRaftPort(t *testing.T) {
	testproc.Long(t)
	n1 := testcluster.Start(t, "n1", t.TempDir(), nil, func(c *idnode.Config) { c.ClusterSecret = "the-cluster's" })
	start := time.Now()
	_, err := testcluster.Open(t, "n2", t.TempDir(), n1, func(c *idnode.Config) { c.ClusterSecret = "another" })
	took := time.Since(start)
	switch {
	case err == nil:
		t.Fatal("a joiner with another cluster secret was admitted")
	case !errors.Is(err, cluster.ErrRefused) || !errors.Is(err, cluster.ErrAuth):
		t.Fatalf("the joiner's start failed, but not as a refusal at the Raft port (ErrRefused and ErrAuth): %v", err)
	case !strings.Contains(err.Error(), "Raft port "+n1.Cluster.RaftAddr()) || !strings.Contains(err.Error(), "--cluster-secret"):
		t.Fatalf("the refusal does not name the Raft port and the remedy: %v", err)
	case took > 20*time.Second:
		t.Fatalf("the refusal took %v: it was retried as if no one answered", took)
	}
	t.Logf("refused in %v: %v", took.Round(time.Millisecond), err)
	if calls := commandCalls(t, n1, "cluster"); calls != "0" {
		t.Errorf("n1 answered %s CLUSTER commands on its RESP port", calls)
	}
}

// TestRemovedJoinCrossesAsErrRemoved: a node the cluster removed asks to
// join under its old ID, through a follower that sends the join on to the
// leader: the refusal crosses both hops of the Raft-port channel as
// ErrRemoved (and ErrRefused). Restarted on its directory, the node's start
// is refused the same way and Rejoin offers to join again as a new member.
func TestRemovedJoinCrossesAsErrRemoved(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	n3 := nodes[2]
	if n3.Cluster.IsLeader() {
		t.Fatal("n3 leads: it joined last")
	}
	leader := nodes.WaitLeader(t)
	if err := leader.Client.Do(ctx, "CLUSTER", "FORGET", "n3").Err(); err != nil {
		t.Fatalf("FORGET n3: %v", err)
	}
	follower := nodes[:2].Follower(t, leader)
	_, _, _, err := n3.Cluster.JoinThrough(ctx, follower.Cluster.RaftAddr(), "n3", n3.Cluster.RaftAddr(), n3.Addr)
	if !errors.Is(err, cluster.ErrRemoved) || !errors.Is(err, cluster.ErrRefused) {
		t.Fatalf("the removed n3's join through follower %s: want ErrRemoved and ErrRefused, got %v", follower.ID, err)
	}
	t.Logf("through %s: %v", follower.ID, err)

	n3.Stop()
	var cfg idnode.Config
	_, err = testcluster.Open(t, "n3", n3.Dir, leader, func(c *idnode.Config) { cfg = *c })
	if !errors.Is(err, cluster.ErrRemoved) {
		t.Fatalf("the removed n3 restarted on its directory: want ErrRemoved, got %v", err)
	}
	if _, ok := idnode.Rejoin(cfg, err); !ok {
		t.Fatalf("Rejoin does not take the removed n3's refusal: %v", err)
	}
}
