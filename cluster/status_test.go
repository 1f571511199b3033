package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"idserver/cluster"
	"idserver/internal/testproc"
)

// TestStatusReportsToleranceTrailsAndLeases: with three members every node
// reports a failure tolerance of 1, and each member's lease end and how far
// it trails the leader (not unknown); once one member stops, the leader
// reports 0.
func TestStatusReportsToleranceTrailsAndLeases(t *testing.T) {
	testproc.Long(t)
	var nodes []*node
	for i := 1; i <= 3; i++ {
		var via *node
		if i > 1 {
			via = nodes[0]
		}
		n, err := openNode(t, fmt.Sprintf("n%d", i), t.TempDir(), via, nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	complete := func(st cluster.Status) error {
		if st.FailureTolerance != 1 || len(st.Members) != 3 {
			return fmt.Errorf("node %s: tolerance %d with %d members", st.NodeID, st.FailureTolerance, len(st.Members))
		}
		for _, m := range st.Members {
			if m.Trails < 0 || m.LeaseEndMS <= 0 {
				return fmt.Errorf("node %s lists %s trailing %d, lease end %d", st.NodeID, m.NodeID, m.Trails, m.LeaseEndMS)
			}
		}
		return nil
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err = nil
		for _, n := range nodes {
			if e := complete(n.cl.Status()); e != nil {
				err = e
			}
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	var leader, other *node
	for _, n := range nodes {
		switch {
		case n.cl.IsLeader():
			leader = n
		case other == nil:
			other = n
		}
	}
	if leader == nil || other == nil {
		t.Fatal("no leader, or no follower")
	}
	other.stop()
	for deadline := time.Now().Add(30 * time.Second); leader.cl.Status().FailureTolerance != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the leader still reports tolerance %d with %s stopped", leader.cl.Status().FailureTolerance, other.id)
		}
	}
}
