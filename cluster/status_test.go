package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"idserver/cluster"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestStatusReportsToleranceTrailsAndLeases: with three members every node
// reports a failure tolerance of 1, and each member's lease end and how far
// it trails the leader (not unknown); once one member stops, the leader
// reports 0.
func TestStatusReportsToleranceTrailsAndLeases(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
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
	wait.For(t, 30*time.Second, "every node's status complete", func() (bool, string) {
		for _, n := range nodes {
			if err := complete(n.Cluster.Status()); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	var leader, other *testcluster.Node
	for _, n := range nodes {
		switch {
		case n.Cluster.IsLeader():
			leader = n
		case other == nil:
			other = n
		}
	}
	if leader == nil || other == nil {
		t.Fatal("no leader, or no follower")
	}
	other.Stop()
	wait.For(t, 30*time.Second, "the leader reports tolerance 0 with "+other.ID+" stopped", func() (bool, string) {
		tol := leader.Cluster.Status().FailureTolerance
		return tol == 0, fmt.Sprintf("tolerance %d", tol)
	})
}
