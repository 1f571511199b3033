package cluster_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"idserver/engine"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	idnode "idserver/node"
)

// TestReservedWorkersNeverTaken: in a cluster of 8 worker IDs with 0-2, 4
// and 6 reserved, the members get 3, 5 and 7, a fourth joiner is refused
// while they hold them, and the members that replace forgotten ones get
// the forgotten IDs, never a reserved one; the IDs every member issues
// carry its unreserved worker ID; worker_ids_free leaves the reserved ones
// out; a joiner with another --reserved-workers is refused while a worker
// ID is free, both layouts named.
func TestReservedWorkersNeverTaken(t *testing.T) {
	testproc.Long(t)
	layout := engine.DefaultLayout()
	layout.WorkerBits, layout.SeqBits, layout.Reserved = 3, 19, "0-2,4,6"
	with := func(l engine.Layout) func(*idnode.Config) {
		return func(c *idnode.Config) { c.Layout = l }
	}
	ctx := context.Background()
	nodes := testcluster.New(t, 3, with(layout))
	checkIssued := func(n *testcluster.Node) {
		t.Helper()
		ids, err := n.Client.Do(ctx, "NEXTID", 100).Int64Slice()
		if err != nil {
			t.Fatalf("%s: NEXTID: %v", n.ID, err)
		}
		for _, id := range ids {
			p, _ := layout.Decode(id)
			if layout.IsReserved(p.Worker) || p.Worker != n.Worker {
				t.Fatalf("%s (worker %d) issued %d on worker %d", n.ID, n.Worker, id, p.Worker)
			}
		}
	}
	freeWorkers := func(want string) {
		t.Helper()
		wait.For(t, 10*time.Second, "worker_ids_free:"+want, func() (bool, string) {
			info, _ := nodes[0].Client.Do(ctx, "CLUSTER", "INFO").Text()
			return strings.Contains(info, "\r\nworker_ids_free:"+want+"\r\n"), info
		})
	}
	for i, want := range []int64{3, 5, 7} {
		if nodes[i].Worker != want {
			t.Fatalf("%s got worker %d, want %d", nodes[i].ID, nodes[i].Worker, want)
		}
		checkIssued(nodes[i])
	}
	freeWorkers("0")
	_, err := testcluster.Open(t, "n4", t.TempDir(), nodes[0], with(layout))
	if err == nil || !strings.Contains(err.Error(), "no free worker ID: all 3 are held by members (5 more are reserved by --reserved-workers)") {
		t.Fatalf("a fourth joiner with every unreserved worker ID held: %v", err)
	}
	// Replace n3, then n2: each newcomer takes the forgotten worker ID.
	for _, step := range []struct {
		gone int
		name string
	}{{2, "n6"}, {1, "n7"}} {
		gone := nodes[step.gone]
		gone.Stop()
		nodes = slices.Delete(slices.Clone(nodes), step.gone, step.gone+1)
		if err := nodes[0].Client.Do(ctx, "CLUSTER", "FORGET", gone.ID).Err(); err != nil {
			t.Fatal(err)
		}
		freeWorkers("1")
		// With a worker ID free, a joiner with other reserved ones is
		// refused by the layout alone.
		other := layout
		other.Reserved = "0-2,4"
		_, err = testcluster.Open(t, "n5", t.TempDir(), nodes[0], with(other))
		if err == nil || !strings.Contains(err.Error(), "reserved-workers=0-2,4]") || !strings.Contains(err.Error(), "reserved-workers=0-2,4,6]") {
			t.Fatalf("a joiner with other reserved workers: %v", err)
		}
		name := step.name
		n := testcluster.Start(t, name, t.TempDir(), nodes.WaitLeader(t), with(layout))
		if n.Worker != gone.Worker {
			t.Fatalf("%s got worker %d, want %s's forgotten %d", name, n.Worker, gone.ID, gone.Worker)
		}
		checkIssued(n)
		nodes = append(nodes, n)
		freeWorkers("0")
	}
}
