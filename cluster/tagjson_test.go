package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestTagsOfAnyBytesAcrossNodes: tags whose names are not UTF-8, among
// them names that differ only in bytes JSON cannot carry ("\xff" and
// "\xfe"), are allocated and raised (MSET) through a follower (forwarded
// requests), then installed by a new node from a snapshot: every tag keeps
// its own counter, and the new node issues above every value handed out.
func TestTagsOfAnyBytesAcrossNodes(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, snapshotEvery(16))
	ctx := context.Background()
	l := nodes.WaitLeader(t)
	f := nodes.Follower(t, l)
	tags := []string{"\xff", "\xfe", "a\xffb", "a\xfeb", "\x00", "plain", "é"}
	last := map[string]int64{}
	for round := range 3 {
		for _, tag := range tags {
			v, err := f.Client.Do(ctx, "NEXTSEG", tag, 100).Int64Slice()
			if err != nil {
				t.Fatalf("NEXTSEG %q: %v", tag, err)
			}
			if want := int64(round*100 + 1); v[0] != want {
				t.Fatalf("round %d: NEXTSEG %q gave %v, want it to start at %d: tags share a counter", round, tag, v, want)
			}
			last[tag] = v[1]
		}
	}
	// Floors through the follower (MSET, as idserver import sends them):
	// each lands on its own tag.
	args := []any{"MSET"}
	for i, tag := range tags {
		last[tag] += int64(1000 * (i + 1))
		args = append(args, tag, last[tag])
	}
	if err := f.Client.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("MSET through the follower: %v", err)
	}
	for _, tag := range tags {
		if v, err := f.Client.Do(ctx, "INCR", tag).Int64(); err != nil || v <= last[tag] {
			t.Fatalf("INCR %q after its floor %d through the follower: %d %v", tag, last[tag], v, err)
		} else {
			last[tag] = v
		}
	}
	if err := l.Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n4 := testcluster.Start(t, "n4", t.TempDir(), l, snapshotEvery(16))
	for _, tag := range tags {
		eventuallyGet(t, n4, tag, last[tag])
		v, err := n4.Client.Do(ctx, "INCR", tag).Int64()
		if err != nil || v <= last[tag] {
			t.Errorf("INCR %q on the node that installed the snapshot: %d %v, want above %d", tag, v, err, last[tag])
		}
	}
	if got := n4.Cluster.Size(); got != len(tags) {
		t.Errorf("the new node holds %d tags, want %d", got, len(tags))
	}
}

// eventuallyGet waits until n's state has tag at want or above.
func eventuallyGet(t *testing.T, n *testcluster.Node, tag string, want int64) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("%s has %q at %d or above", n.ID, tag, want), func() (bool, string) {
		v, _ := n.Cluster.Get(tag)
		return v >= want, fmt.Sprintf("%d", v)
	})
}
