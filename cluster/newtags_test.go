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

// TestConcurrentNewTagsAreEachIssuedOnce: 50 connections making new tags
// at once, each its own and all of them the same few, as the group commit
// gathers them into shared log entries (the same new tag several times in
// one entry): every tag's values are distinct, its own tags' first INCR
// answers 1, and a shared tag's 50 INCRs answer 50 distinct values.
func TestConcurrentNewTagsAreEachIssuedOnce(t *testing.T) {
	testproc.Long(t)
	ctx := context.Background()
	const conns, own, shared = 50, 40, 8
	nodes := testcluster.New(t, 1, nil)
	l := nodes.WaitLeader(t)
	type got struct {
		tag string
		v   int64
	}
	results := make(chan got, conns*(own*2+shared))
	errs := make(chan error, conns)
	for c := range conns {
		go func() {
			for i := range own {
				tag := fmt.Sprintf("own:%d:%d", c, i)
				for want := int64(1); want <= 2; want++ {
					v, err := l.Client.Incr(ctx, tag).Result()
					if err != nil || v != want {
						errs <- fmt.Errorf("INCR %s: %d %v, want %d", tag, v, err, want)
						return
					}
				}
				if i < shared {
					tag = fmt.Sprintf("shared:%d", (i+c)%shared)
					v, err := l.Client.Incr(ctx, tag).Result()
					if err != nil {
						errs <- fmt.Errorf("INCR %s: %v", tag, err)
						return
					}
					results <- got{tag, v}
				}
			}
			errs <- nil
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(results)
	seen := map[got]bool{}
	for r := range results {
		if seen[r] {
			t.Fatalf("%s answered %d twice", r.tag, r.v)
		}
		seen[r] = true
	}
	if len(seen) != conns*shared {
		t.Fatalf("%d answers on the shared tags, want %d", len(seen), conns*shared)
	}
	if n, err := l.Client.DBSize(ctx).Result(); err != nil || n != conns*own+shared {
		t.Fatalf("DBSIZE %d %v, want %d", n, err, conns*own+shared)
	}
}
