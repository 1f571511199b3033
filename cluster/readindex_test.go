package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"idserver/cluster"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
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
	n2, err := testcluster.Open(t, "n2", t.TempDir(), nil, timings(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n3, err := testcluster.Open(t, "n3", t.TempDir(), n2, timings(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n1, err := testcluster.Open(t, "n1", t.TempDir(), n2, timings(40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nodes := testcluster.Cluster{n1, n2, n3}
	ctx := context.Background()
	// Hand the leadership on until n1, the slow one, has it.
	wait.For(t, 90*time.Second, "n1 takes the leadership", func() (bool, string) {
		l := nodes.WaitLeader(t)
		if l == n1 {
			return true, ""
		}
		if st := l.Cluster.Status(); st.Voters < 3 {
			return false, "the joiners are not voters yet"
		}
		if err := cluster.TransferLeadershipTo(l.Cluster, "n1", n1.Stream.Addr().String()); err != nil {
			t.Logf("transfer from %s: %v", l.ID, err)
		}
		return false, l.ID + " leads"
	})
	old, err := n1.Client.Incr(ctx, "stale").Result()
	if err != nil {
		t.Fatal(err)
	}
	n1.Stream.Partition(true)
	var fresh int64
	wait.For(t, 60*time.Second, "a new leader hands out a value", func() (bool, string) {
		l := (testcluster.Cluster{n2, n3}).Leader()
		if l == nil {
			return false, "neither n2 nor n3 leads"
		}
		fresh, err = l.Client.Incr(ctx, "stale").Result()
		return err == nil, fmt.Sprint(err)
	})
	if !n1.Cluster.IsLeader() {
		t.Skip("n1 noticed it was cut off before the test could ask it (a slow machine)")
	}
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	v, ok, err := n1.Cluster.High(gctx, "stale")
	t.Logf("n1 (cut off, still leader: %v) handed out %d; the new leader %d; n1's GET: %d %v %v", n1.Cluster.IsLeader(), old, fresh, v, ok, err)
	switch {
	case err != nil && !errors.Is(err, cluster.ErrNoLeader):
		t.Fatalf("the deposed leader's GET: %v, want ErrNoLeader", err)
	case err == nil && v < fresh:
		t.Fatalf("the deposed leader's GET answered %d, below %d the new leader handed out before it", v, fresh)
	}
	n1.Stream.Partition(false)
}
