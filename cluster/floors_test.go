package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	idnode "idserver/node"
)

// TestMSetThroughFollowerRaisesEveryMember: an MSET sent to a follower
// raises every tag on every member in one entry; a segment every node
// buffered before it is fenced, so every value issued afterwards, on any
// member, is above the floors; a floor below a tag's value leaves it as
// it is; a bad value refuses the whole call.
func TestMSetThroughFollowerRaisesEveryMember(t *testing.T) {
	ctx := context.Background()
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	l := nodes.WaitLeader(t)
	f := nodes.Follower(t, l)
	for _, n := range nodes { // each buffers a segment of a and b below the floors
		for _, tag := range []string{"a", "b"} {
			if err := n.Client.Do(ctx, "INCR", tag).Err(); err != nil {
				t.Fatalf("INCR %s on %s: %v", tag, n.ID, err)
			}
		}
	}
	const many = 500 // with a, b, c: 1007 arguments, within the 1024 the frame guard takes
	args := []any{"MSET", "a", 10_000, "b", 20_000, "c", 5}
	for i := range many {
		args = append(args, fmt.Sprintf("m%d", i), 1000+i)
	}
	before := l.Cluster.Applies()
	if s, err := f.Client.Do(ctx, args...).Text(); err != nil || s != "OK" {
		t.Fatalf("MSET through %s: %q %v", f.ID, s, err)
	}
	// One entry for the MSET; lease renewals may add one or two.
	if n := l.Cluster.Applies() - before; n > 3 {
		t.Errorf("MSET of %d pairs proposed %d entries, want 1 (and lease renewals)", many+3, n)
	}
	floors := map[string]int64{"a": 10_000, "b": 20_000, "c": 5, "m0": 1000, fmt.Sprintf("m%d", many-1): 1000 + many - 1}
	for _, n := range nodes {
		for tag, floor := range floors {
			// Every member applied the MSET before it answered OK.
			if v, ok := n.Cluster.Get(tag); !ok || v != floor {
				t.Errorf("%s on %s after MSET: %d %v, want %d", tag, n.ID, v, ok, floor)
			}
		}
	}
	for _, n := range nodes {
		for tag, floor := range floors {
			v, err := n.Client.Do(ctx, "INCR", tag).Int64()
			if err != nil || v <= floor {
				t.Errorf("INCR %s on %s after MSET %s %d: %d %v (a value at or below the floor: its buffer was not fenced)", tag, n.ID, tag, floor, v, err)
			}
		}
	}
	// A floor below a tag's value leaves it as it is.
	top, err := l.Client.Do(ctx, "INCR", "a").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Client.Do(ctx, "MSET", "a", 3, "d", 7).Err(); err != nil {
		t.Fatalf("MSET a 3 d 7: %v", err)
	}
	for _, n := range nodes {
		if v, err := n.Client.Do(ctx, "INCR", "a").Int64(); err != nil || v <= top {
			t.Errorf("INCR a on %s after a floor below it: %d %v, want above %d", n.ID, v, err, top)
		}
	}
	if v, _ := l.Cluster.Get("d"); v != 7 {
		t.Errorf("d after MSET d 7: %d", v)
	}
	// A bad value refuses the whole call, naming its tag.
	err = f.Client.Do(ctx, "MSET", "x", 1, "y", "abc").Err()
	if err == nil || !strings.Contains(err.Error(), `"y"`) || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("MSET x 1 y abc: %v, want an error naming y", err)
	}
	if err := f.Client.Do(ctx, "MSET", "x", 1, "y", -1).Err(); err == nil {
		t.Fatal("MSET y -1: OK")
	}
	if n, err := l.Client.Do(ctx, "EXISTS", "x", "y").Int(); err != nil || n != 0 {
		t.Fatalf("EXISTS x y after refused MSETs: %d %v, want 0", n, err)
	}
	if err := f.Client.Do(ctx, "MSET", "x").Err(); err == nil || !strings.Contains(err.Error(), "wrong number of arguments") {
		t.Fatalf("MSET x: %v", err)
	}
}

// TestMSetSplitsLargeCalls: an MSET whose tags take more bytes than one
// entry holds is committed as several, and every floor lands.
func TestMSetSplitsLargeCalls(t *testing.T) {
	ctx := context.Background()
	testproc.Long(t)
	n := testcluster.New(t, 1, nil)[0]
	const pairs = 500 // of 250-byte tags: 125 KB, two entries
	args := []any{"MSET"}
	for i := range pairs {
		args = append(args, fmt.Sprintf("s%d%s", i, strings.Repeat("x", 240)), 100+i)
	}
	before := n.Cluster.Applies()
	if err := n.Client.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if e := n.Cluster.Applies() - before; e < 2 {
		t.Errorf("MSET of 125 KB of tags proposed %d entries, want 2", e)
	}
	if size, _ := n.Client.DBSize(ctx).Result(); size != pairs {
		t.Fatalf("DBSIZE after MSET of %d: %d", pairs, size)
	}
	if v, err := n.Client.Do(ctx, "INCR", fmt.Sprintf("s%d%s", pairs-1, strings.Repeat("x", 240))).Int64(); err != nil || v != 100+pairs {
		t.Fatalf("INCR of the last tag: %d %v, want %d", v, err, 100+pairs)
	}
}

// TestMaxTagsRefusesNewTagsOnEveryMember: with --max-tags 3 the fourth
// new tag is refused by every way of making one, on the leader and on a
// follower alike; existing tags keep working, DBSIZE stays 3, and the
// bound survives a restart (it is in the state, not in the flag).
func TestMaxTagsRefusesNewTagsOnEveryMember(t *testing.T) {
	ctx := context.Background()
	testproc.Long(t)
	nodes := testcluster.New(t, 3, func(c *idnode.Config) { c.MaxTags = 3 })
	l := nodes.WaitLeader(t)
	f := nodes.Follower(t, l)
	for _, n := range nodes {
		wait.For(t, 20*time.Second, n.ID+" holds the bound of 3 tags", func() (bool, string) {
			return n.Cluster.MaxTags() == 3, fmt.Sprint("max tags ", n.Cluster.MaxTags())
		})
		if info := n.Client.Info(ctx, "cluster").Val(); !strings.Contains(info, "max_tags:3\r\n") {
			t.Fatalf("INFO cluster on %s has no max_tags:3:\n%s", n.ID, info)
		}
	}
	for _, cmd := range [][]any{{"INCR", "t1"}, {"INCRBY", "t2", 5}, {"SET", "t3", 10}} {
		if err := f.Client.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	refused := func(n *testcluster.Node) {
		t.Helper()
		for _, cmd := range [][]any{{"INCR", "t4"}, {"INCRBY", "t4", 2}, {"NEXTSEG", "t4", 10}, {"SET", "t4", 1}, {"MSET", "t1", 500, "t4", 1}} {
			err := n.Client.Do(ctx, cmd...).Err()
			if err == nil || !strings.Contains(err.Error(), "tag limit reached: --max-tags 3") {
				t.Errorf("%v on %s: %v, want the tag limit", cmd, n.ID, err)
			}
		}
		if v, _ := n.Cluster.Get("t1"); v >= 500 {
			t.Errorf("t1 at %d: a refused MSET raised it", v)
		}
		for _, tag := range []string{"t1", "t2", "t3"} {
			if err := n.Client.Do(ctx, "INCR", tag).Err(); err != nil {
				t.Errorf("INCR %s (existing) on %s: %v", tag, n.ID, err)
			}
		}
		if size, err := n.Client.DBSize(ctx).Result(); err != nil || size != 3 {
			t.Errorf("DBSIZE on %s: %d %v, want 3", n.ID, size, err)
		}
	}
	refused(l)
	refused(f)
	if t.Failed() {
		return
	}
	// Restarted without the flag, the follower still holds the bound the
	// leader committed.
	f.Stop()
	f2, err := testcluster.Open(t, f.ID, f.Dir, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f2.Cluster.MaxTags(); got != 3 {
		t.Fatalf("max tags after a restart: %d, want 3", got)
	}
	refused(f2)
}
