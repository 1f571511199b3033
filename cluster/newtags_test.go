package cluster_test

import (
	"context"
	"fmt"
	"testing"

	"idserver/internal/testcluster"
	"idserver/internal/testproc"
)

// TestPipelinedNewTagsShareLogEntries: a pipeline of INCRs of tags that do
// not exist yet, from one connection, allocates their first segments in
// batches (a few log entries), not one log entry each, through the leader
// and through a follower; every INCR answers 1.
func TestPipelinedNewTagsShareLogEntries(t *testing.T) {
	testproc.Long(t)
	ctx := context.Background()
	const tags = 2000
	nodes := testcluster.New(t, 3, nil)
	l := nodes.WaitLeader(t)
	for _, via := range []*testcluster.Node{l, nodes.Follower(t, l)} {
		t.Run(via.ID, func(t *testing.T) {
			before := l.Cluster.Status().AppliedIndex
			pipe := via.Client.Pipeline()
			for i := range tags {
				pipe.Incr(ctx, fmt.Sprintf("%s:%d", via.ID, i))
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, cmd := range cmds {
				if v, err := cmd.(interface{ Result() (int64, error) }).Result(); err != nil || v != 1 {
					t.Fatalf("INCR %s:%d: %d %v, want 1", via.ID, i, v, err)
				}
			}
			entries := l.Cluster.Status().AppliedIndex - before
			if entries > tags/20 {
				t.Fatalf("%d new tags through %s took %d log entries, want at most %d", tags, via.ID, entries, tags/20)
			}
			t.Logf("%d new tags through %s: %d log entries", tags, via.ID, entries)
		})
	}
}
