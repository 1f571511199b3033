package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"idserver/cluster"
	"idserver/internal/testproc"
	idnode "idserver/node"
)

// TestDeposedLeaderAnswersNoStaleGET: a leader cut off from the others
// that has not noticed yet (its lease, half its 40 s heartbeat timeout,
// outlasts the others' election: theirs is 5 s) while a new leader hands
// out values of a tag. Its GET of that tag must not answer below them: it
// cannot confirm it leads, so it answers ErrNoLeader (TRYAGAIN).
func TestDeposedLeaderAnswersNoStaleGET(t *testing.T) {
	testproc.Long(t)
	// Heartbeat and election timeouts of hb: the default 500 ms scaled.
	timings := func(hb time.Duration) func(*idnode.Config) {
		return func(c *idnode.Config) { c.RaftTimeoutScale = float64(hb) / float64(cluster.TimingFor(1).Heartbeat) }
	}
	// n2 leads first: autopilot promotes the joiners on its (short) timing.
	n2, err := openNode(t, "n2", t.TempDir(), nil, timings(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n3, err := openNode(t, "n3", t.TempDir(), n2, timings(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n1, err := openNode(t, "n1", t.TempDir(), n2, timings(40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*node{n1, n2, n3}
	ctx := context.Background()
	// Hand the leadership on until n1, the slow one, has it.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		l := leader(t, nodes)
		if l == n1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 never took the leadership; %s leads", l.id)
		}
		if st := l.cl.Status(); st.Voters < 3 {
			continue // the joiners are not voters yet
		}
		if err := cluster.TransferLeadershipTo(l.cl, "n1", n1.stream.Addr().String()); err != nil {
			t.Logf("transfer from %s: %v", l.id, err)
		}
	}
	old, err := n1.rdb.Incr(ctx, "stale").Result()
	if err != nil {
		t.Fatal(err)
	}
	n1.stream.partition(true)
	var fresh int64
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n2.cl.IsLeader() || n3.cl.IsLeader() {
			l := n2
			if n3.cl.IsLeader() {
				l = n3
			}
			if fresh, err = l.rdb.Incr(ctx, "stale").Result(); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader handed out a value within 60s: %v", err)
		}
	}
	if !n1.cl.IsLeader() {
		t.Skip("n1 noticed it was cut off before the test could ask it (a slow machine)")
	}
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	v, ok, err := n1.cl.High(gctx, "stale")
	t.Logf("n1 (cut off, still leader: %v) handed out %d; the new leader %d; n1's GET: %d %v %v", n1.cl.IsLeader(), old, fresh, v, ok, err)
	switch {
	case err != nil && !errors.Is(err, cluster.ErrNoLeader):
		t.Fatalf("the deposed leader's GET: %v, want ErrNoLeader", err)
	case err == nil && v < fresh:
		t.Fatalf("the deposed leader's GET answered %d, below %d the new leader handed out before it", v, fresh)
	}
	n1.stream.partition(false)
}
