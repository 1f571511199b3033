package cluster_test

import (
	"context"
	"fmt"
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

// tagNames is prefix0 .. prefix<n-1>.
func tagNames(prefix string, n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return tags
}

// incrAll INCRs each of tags once, over 16 connections of pipelines, and
// returns the values in the order of tags.
func incrAll(t *testing.T, rdb *redis.Client, tags []string) []int64 {
	t.Helper()
	out := make([]int64, len(tags))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	const workers, pipe = 16, 50 // a new tag costs a Raft round: a pipe stays well inside the client's 3 s read timeout under load
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := w * pipe; from < len(tags); from += workers * pipe {
				to := min(from+pipe, len(tags))
				err := testcluster.RetryTryAgain(func() error {
					p := rdb.Pipeline()
					cmds := make([]*redis.IntCmd, 0, to-from)
					for _, tag := range tags[from:to] {
						cmds = append(cmds, p.Incr(context.Background(), tag))
					}
					if _, err := p.Exec(context.Background()); err != nil {
						return err
					}
					for i, c := range cmds {
						out[from+i] = c.Val()
					}
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("INCR %s..: %w", tags[from], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return out
}

// above fails the test unless each value of got is above the one of was.
func above(t *testing.T, what string, tags []string, was, got []int64) {
	t.Helper()
	bad := 0
	for i := range tags {
		if got[i] <= was[i] {
			if bad++; bad <= 5 {
				t.Errorf("%s: %s at %d, not above %d", what, tags[i], got[i], was[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d tags not above their high-water", what, bad, len(tags))
	}
}

// TestManyTagsContinueAfterRestart: a node with 50,000 tags, with a Raft
// snapshot and entries after it, restarts (reading its tags from Pebble,
// not from the snapshot) and every tag continues above every value it
// handed out; DBSIZE counts them all.
func TestManyTagsContinueAfterRestart(t *testing.T) {
	testproc.Long(t)
	const n = 50_000
	ctx := context.Background()
	nodes := testcluster.New(t, 1, snapshotEvery(64))
	tags := tagNames("many:", n)
	before := incrAll(t, nodes[0].Client, tags)
	if err := nodes[0].Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	copy(before, incrAll(t, nodes[0].Client, tags[:1000])) // entries after the snapshot
	nodes[0].Stop()
	start := time.Now()
	n1, err := testcluster.Open(t, "n1", nodes[0].Dir, nil, snapshotEvery(64))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart with %d tags: %v until a leader", n, time.Since(start))
	if size, err := n1.Client.DBSize(ctx).Result(); err != nil || size != n {
		t.Fatalf("DBSIZE after the restart: %d %v, want %d", size, err, n)
	}
	above(t, "INCR after the restart", tags, before, incrAll(t, n1.Client, tags))
}

// TestFollowerInstallsSnapshotOfManyTags: a follower cut off while the
// leader creates 50,000 tags and compacts its log catches up by a snapshot
// of all of them; led by it, every tag issues above every value the old
// leader handed out; and the bound on tags, reached, refuses the next tag
// on every member, DBSIZE right on each.
func TestFollowerInstallsSnapshotOfManyTags(t *testing.T) {
	testproc.Long(t)
	const n = 50_000
	ctx := context.Background()
	nodes := testcluster.New(t, 3, func(c *idnode.Config) { c.SnapshotThreshold = 64; c.MaxTags = n })
	l := nodes.WaitLeader(t)
	for _, nd := range nodes {
		wait.For(t, 20*time.Second, nd.ID+" holds the bound on tags", func() (bool, string) {
			return nd.Cluster.MaxTags() == n, fmt.Sprint("max tags ", nd.Cluster.MaxTags())
		})
	}
	f := nodes.Follower(t, l)
	f.Stream.Partition(true)
	tags := tagNames("snap:", n)
	handed := incrAll(t, l.Client, tags)
	if err := l.Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	f.Stream.Partition(false)
	rejoined := time.Now()
	wait.For(t, 60*time.Second, "the follower installs the snapshot", func() (bool, string) {
		return f.Cluster.Size() == n, fmt.Sprintf("%d tags of %d", f.Cluster.Size(), n)
	})
	t.Logf("the follower caught up by a snapshot of %d tags in %v", n, time.Since(rejoined))
	got := make([]int64, n)
	for i, tag := range tags {
		got[i], _ = f.Cluster.Get(tag)
		got[i]++ // Get is the high-water: the next value is above it
	}
	above(t, "the follower's high-water", tags, handed, got)
	if err := cluster.TransferLeadershipTo(l.Cluster, f.ID, f.Stream.Addr().String()); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the follower leads", func() (bool, string) { return f.Cluster.IsLeader(), "not yet" })
	above(t, "INCR led by the follower", tags, handed, incrAll(t, f.Client, tags))
	for _, nd := range nodes {
		if err := nd.Client.Incr(ctx, "one-more").Err(); err == nil || !strings.Contains(err.Error(), "tag limit reached") {
			t.Errorf("a new tag past the bound on %s: %v, want the tag limit", nd.ID, err)
		}
		if size, err := nd.Client.DBSize(ctx).Result(); err != nil || size != n {
			t.Errorf("DBSIZE on %s: %d %v, want %d", nd.ID, size, err, n)
		}
	}
}
