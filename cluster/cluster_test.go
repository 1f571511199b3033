package cluster_test

// In-process clusters: real Raft over loopback TCP, real Pebble, real RESP
// servers for the follower-to-leader forwarding.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"idserver/cluster"
	"idserver/engine"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	idnode "idserver/node"
	"idserver/persist"
)

// snapshotEvery configures Raft to snapshot every n log entries (its
// default when n is 0).
func snapshotEvery(n uint64) func(*idnode.Config) {
	return func(c *idnode.Config) { c.SnapshotThreshold = n }
}

func TestConcurrentAllocationsFromEveryNodeAreDisjoint(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	c := testcluster.NewCollector()
	stop := make(chan struct{})
	wg := testcluster.Load(t, nodes, c, stop)
	wait.For(t, 60*time.Second, "500 values from every node", func() (bool, string) {
		counts := map[string]int{}
		for _, n := range nodes {
			counts[n.ID] = c.CountFrom(n.ID)
			if counts[n.ID] < 500 {
				return false, fmt.Sprintf("values per node %v; errors %v", counts, c.Errors())
			}
		}
		return true, ""
	})
	close(stop)
	wg.Wait()
	// Worker IDs differ, GET is above everything handed out.
	workers := map[int64]bool{}
	for _, n := range nodes {
		if workers[n.Worker] {
			t.Fatalf("%s: worker %d not unique", n.ID, n.Worker)
		}
		workers[n.Worker] = true
	}
	// GET on every node, follower or leader, is at least every value handed out.
	for tag, top := range c.Top() {
		for _, n := range nodes {
			hw, err := n.Client.Do(context.Background(), "GET", tag).Int64()
			if err != nil || hw < top {
				t.Fatalf("%s: GET %s on %s = %d (%v), below the value %d handed out", tag, tag, n.ID, hw, err, top)
			}
		}
	}
	l := nodes.WaitLeader(t)
	t.Logf("%d values from 3 nodes, no repeat; %d raft applies on the leader; errors %v", c.Count(), l.Cluster.Applies(), c.Errors())
}

func TestLeaderLossMidLoadLosesNothing(t *testing.T) {
	testproc.Long(t)
	for _, how := range []string{"transfer", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			nodes := testcluster.New(t, 3, nil)
			c := testcluster.NewCollector()
			stop := make(chan struct{})
			wg := testcluster.Load(t, nodes, c, stop)
			c.WaitCount(t, 20*time.Second, 300, "load before the leader change")
			old := nodes.WaitLeader(t)
			if how == "transfer" {
				if err := old.Cluster.TransferLeadership(); err != nil {
					t.Fatal(err)
				}
			} else {
				old.Stop()
			}
			var nl *testcluster.Node
			wait.For(t, testcluster.LeaderTimeout, "a leader other than "+old.ID, func() (bool, string) {
				nl = nodes.Leader()
				return nl != nil && nl != old, "none, or still " + old.ID
			})
			before := c.Count()
			c.WaitCount(t, 20*time.Second, before+300, "values after the leader change")
			close(stop)
			wg.Wait()
			t.Logf("%s: %d values, no repeat; new leader %s; errors %v", how, c.Count(), nl.ID, c.Errors())
		})
	}
}

func TestNodeWithoutQuorumServesBufferThenTryAgain(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	lone := nodes[2]
	// Warm its buffer, then take the quorum away.
	for range 10 {
		if err := lone.Client.Do(ctx, "INCR", "orders").Err(); err != nil {
			t.Fatal(err)
		}
	}
	lone.WaitSpare(t, "orders")
	nodes[0].Stop()
	nodes[1].Stop()
	served, ids := 0, 0
	var err error
	for range 100000 {
		if _, err = lone.Client.Do(ctx, "NEXTID").Int64(); err != nil {
			t.Fatalf("NEXTID without quorum: %v", err)
		}
		ids++
		if err = lone.Client.Do(ctx, "INCR", "orders").Err(); err != nil {
			break
		}
		served++
	}
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("after %d INCRs without quorum: %v, want TRYAGAIN", served, err)
	}
	if served < 90 {
		t.Fatalf("only %d INCRs served from the buffer", served)
	}
	if _, err := lone.Client.Do(ctx, "NEXTID").Int64(); err != nil {
		t.Fatalf("NEXTID after the buffer ran dry: %v", err)
	}
	t.Logf("without quorum: %d INCRs from the buffer, then TRYAGAIN; NEXTID kept working (%d)", served, ids)
}

func TestNewNodeRestoresFromSnapshot(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 1, snapshotEvery(16))
	ctx := context.Background()
	var last int64
	for i := range 200 {
		v, err := nodes[0].Client.Do(ctx, "NEXTSEG", fmt.Sprintf("t%d", i%5), 1000).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		last = v[1]
	}
	if err := nodes[0].Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// A node that joins now gets the state by snapshot, the log being compacted.
	n2 := testcluster.Start(t, "n2", t.TempDir(), nodes[0], snapshotEvery(16))
	wait.For(t, 10*time.Second, "the new node restores t4", func() (bool, string) {
		v, _ := n2.Cluster.Get("t4")
		return v == last, fmt.Sprintf("t4 at %d, want %d", v, last)
	})
	if n2.Cluster.Size() != 5 {
		t.Fatalf("new node has %d tags, want 5", n2.Cluster.Size())
	}
	// And it allocates above what the snapshot holds.
	v, err := n2.Client.Do(ctx, "INCR", "t4").Int64()
	if err != nil || v <= last {
		t.Fatalf("INCR on the restored node: %d %v (snapshot had %d)", v, err, last)
	}
}

// TestRestartAfterInstallingASnapshot: a follower cut off while the leader
// compacts its log past the follower's end catches up by a snapshot. Raft
// keeps the follower's older entries and appends the new ones after the
// snapshot's index, so its log has a gap below the snapshot, which Raft
// never reads. The follower must start again on that directory, not be
// refused as damaged.
func TestRestartAfterInstallingASnapshot(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, snapshotEvery(64))
	ctx := context.Background()
	l := nodes.WaitLeader(t)
	f := nodes.Follower(t, l)
	f.Stream.Partition(true)
	last := newTags(t, l.Client, "t", 200)
	if err := l.Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	f.Stream.Partition(false)
	caughtUp := func(tag string, want int64) func() (bool, string) {
		return func() (bool, string) {
			v, _ := f.Cluster.Get(tag)
			return v >= want, fmt.Sprintf("%s at %d, want %d", tag, v, want)
		}
	}
	wait.For(t, 20*time.Second, "the follower catches up", caughtUp("t199", last))
	lastU := newTags(t, l.Client, "u", 20) // entries after the snapshot on the follower too
	wait.For(t, 20*time.Second, "the follower applies the entries after the snapshot", caughtUp("u19", lastU))
	f.Stop()
	st, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(f.Dir, "raft", "raft.db"), BoltOptions: &bolt.Options{ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := st.FirstIndex()
	end, _ := st.LastIndex()
	missing := 0
	for i := first; i <= end; i++ {
		if st.GetLog(i, new(raft.Log)) != nil {
			missing++
		}
	}
	st.Close()
	if missing == 0 {
		t.Fatalf("the follower's log (%d..%d) has no gap: it did not catch up by a snapshot", first, end)
	}
	t.Logf("the follower's log: entries %d..%d, %d of them missing below the snapshot", first, end, missing)
	f2, err := testcluster.Open(t, f.ID, f.Dir, l, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
	if err != nil {
		t.Fatalf("the follower does not start again: %v", err)
	}
	if v, err := f2.Client.Do(ctx, "INCR", "t199").Int64(); err != nil || v <= last {
		t.Fatalf("INCR on the restarted follower: %d %v (the snapshot had %d)", v, err, last)
	}
}

// newTags makes count new tags prefix0, prefix1, ..., each with a NEXTSEG
// of 100 (an allocation through Raft each), and returns the last range's
// end.
func newTags(t *testing.T, rdb *redis.Client, prefix string, count int) int64 {
	t.Helper()
	var last int64
	for i := range count {
		v, err := rdb.Do(context.Background(), "NEXTSEG", fmt.Sprintf("%s%d", prefix, i), 100).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		last = v[1]
	}
	return last
}

// TestUndecodableEntryBelowTheSnapshotReadsAsMissing: the entries Raft
// keeps at or below its snapshot (the trailing logs) are what a leader
// sends a follower that lags, and the start does not read them. One that
// does not decode is read as missing, as a gap there is
// (TestRestartAfterInstallingASnapshot): Raft sends the snapshot instead,
// where an error would stop that replication for good.
func TestUndecodableEntryBelowTheSnapshotReadsAsMissing(t *testing.T) {
	testproc.Long(t)
	n := testcluster.Start(t, "n1", t.TempDir(), nil, snapshotEvery(64))
	newTags(t, n.Client, "t", 200)
	if err := n.Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	list := snapshots(t, n.Dir)
	if len(list) == 0 {
		t.Fatal("no snapshot")
	}
	db := filepath.Join(n.Dir, "raft", "raft.db")
	b, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var garbled uint64
	err = b.Update(func(tx *bolt.Tx) error {
		logs := tx.Bucket([]byte("logs"))
		k, _ := logs.Cursor().First()
		if k == nil || binary.BigEndian.Uint64(k) >= list[0].Index {
			return fmt.Errorf("no entry kept below the snapshot at %d", list[0].Index)
		}
		garbled = binary.BigEndian.Uint64(k)
		return logs.Put(k, []byte{0xc1, 1, 2, 3}) // 0xc1: no msgpack value
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	n2, err := testcluster.Open(t, n.ID, n.Dir, nil, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
	if err != nil {
		t.Fatalf("a start with entry %d garbled (the snapshot is at %d): %v", garbled, list[0].Index, err)
	}
	if err := cluster.ReadLogEntry(n2.Cluster, garbled); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("reading the garbled entry %d (the snapshot is at %d): %v, want %v", garbled, list[0].Index, err, raft.ErrLogNotFound)
	}
	if err := cluster.ReadLogEntry(n2.Cluster, list[0].Index); err != nil {
		t.Fatalf("reading the snapshot's own entry %d: %v", list[0].Index, err)
	}
}

// snapshots lists the Raft snapshots a stopped node's directory holds,
// newest first.
func snapshots(t *testing.T, dir string) []*raft.SnapshotMeta {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, "raft"), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// twoSnapshots is a stopped node with two Raft snapshots (200 tags made
// before each), its log trimmed after the newest; the list is newest first.
func twoSnapshots(t *testing.T) (*testcluster.Node, []*raft.SnapshotMeta) {
	t.Helper()
	n := testcluster.Start(t, "n1", t.TempDir(), nil, snapshotEvery(64))
	for round := range 2 {
		newTags(t, n.Client, fmt.Sprintf("t%d-", round), 200)
		if err := n.Cluster.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	n.Stop()
	list := snapshots(t, n.Dir)
	if len(list) != 2 {
		t.Fatalf("snapshots: %v, want two", list)
	}
	return n, list
}

// TestCorruptSnapshotIsRefused: the newest snapshot's state.bin damaged,
// Raft falls back to the older one and reads the log from just above it,
// where the entries were compacted away after the newest, and panics
// ('log not found'). The start is refused, naming the snapshot that does
// not open and the entry the older one needs; with no
// snapshot that opens, too (Raft said only 'failed to load any existing
// snapshots').
func TestCorruptSnapshotIsRefused(t *testing.T) {
	testproc.Long(t)
	n, list := twoSnapshots(t)
	for i, want := range []string{"the newest snapshot does not open (snapshot " + list[0].ID + ", at index", "no snapshot of the Raft state opens"} {
		state := filepath.Join(n.Dir, "raft", "snapshots", list[i].ID, "state.bin")
		b, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(state, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = testcluster.Open(t, n.ID, n.Dir, nil, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "CRC mismatch") {
			t.Fatalf("a start with %d of 2 snapshots damaged: %v, want a refusal saying %q", i+1, err, want)
		}
	}
}

// TestNewestSnapshotRemovedIsRefused: the newest of two snapshots removed
// (its directory, or only its meta.json emptied, which the snapshot store
// then does not list), the log trimmed after it: Raft would restore the
// older one and stop on the first entry after it, which is gone. The start
// is refused, naming the older snapshot and where the log begins.
func TestNewestSnapshotRemovedIsRefused(t *testing.T) {
	testproc.Long(t)
	for _, c := range []struct {
		name string
		harm func(snapDir string) error
	}{
		{"directory removed", os.RemoveAll},
		{"meta.json emptied", func(snapDir string) error { return os.WriteFile(filepath.Join(snapDir, "meta.json"), nil, 0o600) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, list := twoSnapshots(t)
			if err := c.harm(filepath.Join(n.Dir, "raft", "snapshots", list[0].ID)); err != nil {
				t.Fatal(err)
			}
			_, err := testcluster.Open(t, n.ID, n.Dir, nil, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
			want := fmt.Sprintf("the newest snapshot listed, at index %d, needs the Raft log from entry %d", list[1].Index, list[1].Index+1)
			if err == nil || !errors.Is(err, persist.ErrDamaged) || !strings.Contains(err.Error(), want) {
				t.Fatalf("a start with the newest snapshot gone: %v, want a refusal saying %q", err, want)
			}
		})
	}
}

// TestUnfinishedSnapshotIsRemovedAtStart: a snapshot whose writing a stop
// cut short (Raft's directory with ".tmp") is never read; the next start
// removes it and starts from the snapshot that is whole.
func TestUnfinishedSnapshotIsRemovedAtStart(t *testing.T) {
	testproc.Long(t)
	n := testcluster.Start(t, "n1", t.TempDir(), nil, snapshotEvery(64))
	last := newTags(t, n.Client, "t", 200)
	if err := n.Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	list := snapshots(t, n.Dir)
	if len(list) != 1 {
		t.Fatalf("snapshots: %v, want one", list)
	}
	// What a kill -9 while writing the next snapshot leaves: its meta and
	// half its state.
	dir := filepath.Join(n.Dir, "raft", "snapshots")
	whole := filepath.Join(dir, list[0].ID)
	cut := filepath.Join(dir, fmt.Sprintf("%d-%d-%d.tmp", list[0].Term, list[0].Index+100, time.Now().UnixMilli()))
	if err := os.Mkdir(cut, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"meta.json", "state.bin"} {
		b, err := os.ReadFile(filepath.Join(whole, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "state.bin" {
			b = b[:len(b)/2]
		}
		if err := os.WriteFile(filepath.Join(cut, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n2, err := testcluster.Open(t, n.ID, n.Dir, nil, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
	if err != nil {
		t.Fatalf("the start after a cut snapshot: %v", err)
	}
	if _, err := os.Stat(cut); !os.IsNotExist(err) {
		t.Fatalf("%s is still there after the start (%v)", cut, err)
	}
	if _, err := os.Stat(whole); err != nil {
		t.Fatalf("the whole snapshot is gone: %v", err)
	}
	if v, err := n2.Client.Do(context.Background(), "INCR", "t199").Int64(); err != nil || v <= last {
		t.Fatalf("INCR t199 after the start: %d %v, want above %d", v, err, last)
	}
}

// TestStoreBehindASnapshotWithAnUnreadableEntryBelowIt: Pebble lags the
// newest Raft snapshot (its batches are not synced: a kill -9 loses the
// last ones) and an entry between the two does not read as one this build
// applies: a command type it does not know, or a known type whose body is
// cut. The start does not replay it (which would stop the process): it
// restores the snapshot, which holds it, and every tag continues above what
// it handed out.
func TestStoreBehindASnapshotWithAnUnreadableEntryBelowIt(t *testing.T) {
	testproc.Long(t)
	for _, c := range []struct {
		name   string
		garble func([]byte) []byte
	}{
		{"unknown type", func([]byte) []byte { return []byte{0xee, 1, 2} }},
		{"cut body", func(b []byte) []byte { return []byte{b[0], 0xff} }}, // a varint that never ends
	} {
		t.Run(c.name, func(t *testing.T) {
			n, snap, applied, last := storeBehindSnapshot(t, 5)
			logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(n.Dir, "raft", "raft.db")})
			if err != nil {
				t.Fatal(err)
			}
			var garbled uint64
			for i := applied + 2; i <= snap.Index && garbled == 0; i++ {
				var l raft.Log
				if logs.GetLog(i, &l) == nil && l.Type == raft.LogCommand {
					l.Data = c.garble(l.Data)
					if err := logs.StoreLog(&l); err != nil {
						t.Fatal(err)
					}
					garbled = i
				}
			}
			logs.Close()
			if garbled == 0 {
				t.Fatalf("no command entry between %d and the snapshot's %d", applied, snap.Index)
			}
			n3, err := testcluster.Open(t, n.ID, n.Dir, nil, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
			if err != nil {
				t.Fatalf("the start with the store at about %d, the snapshot at %d and entry %d unreadable: %v", applied, snap.Index, garbled, err)
			}
			if v, err := n3.Client.Do(context.Background(), "INCR", "b4").Int64(); err != nil || v <= last {
				t.Fatalf("INCR b4 after the start: %d %v, want above %d", v, err, last)
			}
		})
	}
}

// TestCopyWhoseStoreLagsItsCompactSnapshotRestores: a copy of a data
// directory (cp -a of a running node) whose Pebble state is older than its
// newest Raft snapshot, in the compact shape, with no log entry after it:
// the backup image holds the snapshot's state, read as JSON, and restores.
func TestCopyWhoseStoreLagsItsCompactSnapshotRestores(t *testing.T) {
	testproc.Long(t)
	n, snap, _, _ := storeBehindSnapshot(t, 300)
	endLogAt(t, n.Dir, snap.Index, nil)
	img, err := cluster.ImageOf(n.Dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cluster.Restore(img, filepath.Join(t.TempDir(), "restored"),
		cluster.RestoreOptions{SkipValues: 1e12, AheadMS: 5000, WorkerLease: 10 * time.Second, Now: time.Now()})
	if err != nil {
		t.Fatalf("restore of the copy's image: %v (its state begins %q)", err, img.State[:min(16, len(img.State))])
	}
	if res.Tags != 320 {
		t.Fatalf("the restore holds %d tags, want the snapshot's 320", res.Tags)
	}
}

// storeBehindSnapshot is a stopped node ("a0".."a19", then "b0" on, made
// after its Pebble state was copied aside, then a snapshot) whose Pebble
// state is put back behind its newest Raft snapshot, as a kill -9 leaves
// it (the state machine's batches are not synced). It returns the node,
// the snapshot, the last index the Pebble state had applied, and the end
// of the last "b" tag's range.
func storeBehindSnapshot(t *testing.T, tags int) (*testcluster.Node, *raft.SnapshotMeta, uint64, int64) {
	t.Helper()
	n := testcluster.Start(t, "n1", t.TempDir(), nil, snapshotEvery(64))
	newTags(t, n.Client, "a", 20)
	n.Stop()
	pebbleDir := filepath.Join(n.Dir, "pebble")
	behind := filepath.Join(t.TempDir(), "pebble")
	if err := os.CopyFS(behind, os.DirFS(pebbleDir)); err != nil {
		t.Fatal(err)
	}
	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(n.Dir, "raft", "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	applied, _ := logs.LastIndex()
	logs.Close()
	n2 := testcluster.Start(t, n.ID, n.Dir, nil, snapshotEvery(64))
	last := newTags(t, n2.Client, "b", tags)
	if err := n2.Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n2.Stop()
	if err := os.RemoveAll(pebbleDir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(pebbleDir, os.DirFS(behind)); err != nil {
		t.Fatal(err)
	}
	return n, snapshots(t, n.Dir)[0], applied, last
}

// TestStoreBehindASnapshotOverAnotherBranchOfTheLog: Pebble lags the
// newest snapshot, and the log below the snapshot is of another leader's
// branch (entries a deposed leader kept, which the snapshot's history
// replaced). The start restores the snapshot instead of replaying that
// branch: what the snapshot's history handed out is not handed out again.
func TestStoreBehindASnapshotOverAnotherBranchOfTheLog(t *testing.T) {
	testproc.Long(t)
	dir, keep := t.TempDir(), t.TempDir()
	pebbleDir, raftDB := filepath.Join(dir, "pebble"), filepath.Join(dir, "raft", "raft.db")
	save := func(name string) {
		if err := os.CopyFS(filepath.Join(keep, name, "pebble"), os.DirFS(pebbleDir)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(raftDB)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(keep, name, "raft.db"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put := func(pebbleOf, raftOf string) {
		if err := os.RemoveAll(pebbleDir); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(pebbleDir, os.DirFS(filepath.Join(keep, pebbleOf, "pebble"))); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(keep, raftOf, "raft.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(raftDB, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := testcluster.Start(t, "n1", dir, nil, nil)
	newTags(t, n.Client, "a", 3)
	n.Stop()
	save("base")
	n = testcluster.Start(t, "n1", dir, nil, nil) // the branch the snapshot replaces
	newTags(t, n.Client, "z", 80)
	n.Stop()
	save("stale")
	put("base", "base")
	n = testcluster.Start(t, "n1", dir, nil, nil) // the snapshot's branch, in a later term
	n.Stop()
	n = testcluster.Start(t, "n1", dir, nil, nil)
	var last int64
	for range 10 {
		v, err := n.Client.Do(context.Background(), "NEXTSEG", "x", 100).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		last = v[1]
	}
	if err := n.Cluster.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	snap := snapshots(t, dir)[0]
	put("base", "stale")
	n, err := testcluster.Open(t, "n1", dir, nil, nil)
	if err != nil {
		t.Fatalf("the start: %v", err)
	}
	if v, err := n.Client.Do(context.Background(), "NEXTSEG", "x", 100).Int64Slice(); err != nil || v[0] <= last {
		t.Fatalf("NEXTSEG x after the start: %v %v, want above %d, which the snapshot's history (index %d, term %d) handed out", v, err, last, snap.Index, snap.Term)
	}
}

// endLogAt removes the entries of dir's Raft log after index, and writes
// last, when not nil, as the bytes of the entry at index.
func endLogAt(t *testing.T, dir string, index uint64, last []byte) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, "raft", "raft.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		logs := tx.Bucket([]byte("logs"))
		c := logs.Cursor()
		for k, _ := c.Last(); k != nil && binary.BigEndian.Uint64(k) > index; k, _ = c.Last() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		if last == nil {
			return nil
		}
		return logs.Put(binary.BigEndian.AppendUint64(nil, index), last)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDamagedLastEntryAtTheSnapshotIsRefused: the log ends at the newest
// snapshot and its last entry does not decode. Raft reads the last entry at
// start for its term: the start refuses the directory as damaged, naming
// the entry and the remedy.
func TestDamagedLastEntryAtTheSnapshotIsRefused(t *testing.T) {
	testproc.Long(t)
	// Pebble behind the snapshot, so that the log ending at the snapshot
	// is all the start has to go on.
	n, snap, _, _ := storeBehindSnapshot(t, 100)
	endLogAt(t, n.Dir, snap.Index, []byte{0xc1, 1, 2, 3})
	_, err := testcluster.Open(t, n.ID, n.Dir, nil, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
	want := fmt.Sprintf("Raft log entry %d of", snap.Index)
	if err == nil || !errors.Is(err, persist.ErrDamaged) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a start whose last entry (%d, at the snapshot) does not decode: %v, want the damaged directory naming %q", snap.Index, err, want)
	}
}

// TestTrimmedLogWithoutItsSnapshotsIsRefused: the log was trimmed after a
// snapshot (it begins past entry 1) and raft/snapshots no longer holds a
// snapshot: removed, or every meta.json emptied, which the snapshot store
// does not list. Raft would read the log from entry 1 and stop on the
// first missing one: the start refuses the directory as damaged, naming
// where the log begins and the remedy.
func TestTrimmedLogWithoutItsSnapshotsIsRefused(t *testing.T) {
	testproc.Long(t)
	for _, c := range []struct {
		name string
		harm func(snapDir string) error
	}{
		{"removed", os.RemoveAll},
		{"meta.json emptied", func(snapDir string) error {
			metas, _ := filepath.Glob(filepath.Join(snapDir, "*", "meta.json"))
			if len(metas) == 0 {
				return errors.New("no snapshot's meta.json")
			}
			for _, m := range metas {
				if err := os.WriteFile(m, nil, 0o600); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, snap, _, _ := storeBehindSnapshot(t, 300)
			logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(n.Dir, "raft", "raft.db")})
			if err != nil {
				t.Fatal(err)
			}
			first, _ := logs.FirstIndex()
			logs.Close()
			if first <= 1 {
				t.Fatalf("the log begins at %d with a snapshot at %d: not trimmed", first, snap.Index)
			}
			if err := c.harm(filepath.Join(n.Dir, "raft", "snapshots")); err != nil {
				t.Fatal(err)
			}
			_, err = testcluster.Open(t, n.ID, n.Dir, nil, func(c *idnode.Config) { c.SnapshotThreshold = 64 })
			want := fmt.Sprintf("begins at entry %d", first)
			if err == nil || !errors.Is(err, persist.ErrDamaged) || !strings.Contains(err.Error(), want) {
				t.Fatalf("a start with the log from %d and no snapshot: %v, want the damaged directory naming %q", first, err, want)
			}
		})
	}
}

// TestPartitions cuts a follower, then the leader, off the network while
// every node is under load. The cut-off node keeps issuing NEXTID, serves
// INCR from its buffers, then answers TRYAGAIN; the majority carries on;
// after healing, all serve again; no value ever repeats.
func TestPartitions(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	c := testcluster.NewCollector()
	stop := make(chan struct{})
	wg := testcluster.Load(t, nodes[:2], c, stop) // the third node is driven by hand below
	defer func() {
		close(stop)
		wg.Wait()
	}()
	c.WaitCount(t, 20*time.Second, 100, "load before the partitions")

	for _, victim := range []string{"follower", "leader"} {
		l := nodes.WaitLeader(t)
		var lone *testcluster.Node
		for _, n := range nodes {
			if (victim == "leader") == (n == l) {
				lone = n
				if victim == "leader" || n != nodes[0] {
					break
				}
			}
		}
		// Warm the lone node's buffer for the tag it will serve alone.
		tag := "alone-" + victim
		for range 5 {
			if v, err := lone.Client.Do(ctx, "INCR", tag).Int64(); err != nil {
				t.Fatal(err)
			} else {
				c.Add(t, tag, lone.ID, v, v)
			}
		}
		time.Sleep(200 * time.Millisecond)
		lone.Stream.Partition(true)
		wait.For(t, 10*time.Second, victim+": the cut-off node loses its leader", func() (bool, string) {
			id, ok := lone.Cluster.Leader()
			return !ok, fmt.Sprintf("it still sees %v", id)
		})
		before := c.Count()
		served := 0
		var err error
		for range 100000 {
			if _, err = lone.Client.Do(ctx, "NEXTID").Int64(); err != nil {
				t.Fatalf("%s: NEXTID while cut off: %v", victim, err)
			}
			var v int64
			if v, err = lone.Client.Do(ctx, "INCR", tag).Int64(); err != nil {
				break
			}
			c.Add(t, tag, lone.ID, v, v)
			served++
		}
		if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Fatalf("%s: after %d INCRs cut off: %v, want TRYAGAIN", victim, served, err)
		}
		c.WaitCount(t, 20*time.Second, before+served, victim+": the majority hands out values while "+lone.ID+" is cut off")
		lone.Stream.Partition(false)
		wait.For(t, 20*time.Second, victim+": INCR on "+lone.ID+" after healing", func() (bool, string) {
			v, err := lone.Client.Do(ctx, "INCR", tag).Int64()
			if err == nil {
				c.Add(t, tag, lone.ID, v, v)
				return true, ""
			}
			st := lone.Cluster.Status()
			return false, fmt.Sprintf("%v (role %s term %s leader %q)", err, st.Role, st.Term, st.LeaderID)
		})
		t.Logf("%s cut off: %d INCRs from its buffer, then TRYAGAIN; NEXTID kept working; healed and serving", victim, served)
	}
	t.Logf("%d values in all, no repeat; errors %v", c.Count(), c.Errors())
}

// TestForgetFreesTheWorkerID: after CLUSTER FORGET, a new node gets the
// forgotten worker ID and starts its clock above the forgotten node's last
// lease, which that node could not extend.
func TestForgetFreesTheWorkerID(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	gone := nodes[2]
	w := gone.Worker
	lease := gone.Gen.Status().LeaseEndMS
	gone.Stop()
	if err := nodes[1].Client.Do(ctx, "CLUSTER", "FORGET", gone.ID).Err(); err != nil {
		t.Fatal(err)
	}
	// A new node: a new data directory, a new ID.
	n4 := testcluster.Start(t, "n4", t.TempDir(), nodes.WaitLeader(t), nil)
	if w4 := n4.Worker; w4 != w {
		t.Fatalf("new node got worker %d, want the forgotten %d", n4.Worker, w)
	}
	id, err := n4.Client.Do(ctx, "NEXTID").Int64()
	if err != nil {
		t.Fatalf("NEXTID on the new holder of a reused worker: %v", err)
	}
	p, _ := engine.DefaultLayout().Decode(id)
	if ms := p.UnixMS - engine.DefaultEpoch.UnixMilli(); ms <= lease {
		t.Fatalf("new holder of worker %d issued at %d ms, not above the forgotten holder's lease end %d", w, ms, lease)
	}
	wait.For(t, 10*time.Second, "CLUSTER INFO lists n4 and not "+gone.ID, func() (bool, string) {
		info, _ := n4.Client.Do(ctx, "CLUSTER", "INFO").Text()
		return strings.Contains(info, "\r\nmembers:3\r\n") && strings.Contains(info, "n4=") && !strings.Contains(info, gone.ID+"="), info
	})
}

// TestWipedMemberIsRefused: a member's node ID coming back with an empty
// data directory (a replaced disk) is refused at join, names the remedy, and
// changes nothing: its empty log never votes. After CLUSTER FORGET it may
// join, with a worker ID whose IDs never meet the old incarnation's.
func TestWipedMemberIsRefused(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	ctx := context.Background()
	old := nodes[2]
	before, err := old.Client.Do(ctx, "NEXTID", 1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	v, err := nodes[0].Client.Do(ctx, "NEXTSEG", "s", 1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	old.Stop()
	_, err = testcluster.Open(t, old.ID, t.TempDir(), nodes[0], nil)
	if err == nil || !strings.Contains(err.Error(), "CLUSTER FORGET "+old.ID) {
		t.Fatalf("a wiped member rejoined: %v", err)
	}
	info, _ := nodes[0].Client.Do(ctx, "CLUSTER", "INFO").Text()
	if !strings.Contains(info, "\r\nmembers:3\r\n") {
		t.Fatalf("a refused join changed the cluster:\n%s", info)
	}
	// The two survivors still allocate, above everything before.
	w, err := nodes[1].Client.Do(ctx, "NEXTSEG", "s", 1000).Int64Slice()
	if err != nil || w[0] <= v[1] {
		t.Fatalf("NEXTSEG after the refused join: %v %v (before %v)", w, err, v)
	}
	if err := nodes[0].Client.Do(ctx, "CLUSTER", "FORGET", old.ID).Err(); err != nil {
		t.Fatal(err)
	}
	again := testcluster.Start(t, old.ID, t.TempDir(), nodes[0], nil)
	after, err := again.Client.Do(ctx, "NEXTID", 1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, id := range append(before, after...) {
		if seen[id] {
			t.Fatalf("ID %d issued by both incarnations", id)
		}
		seen[id] = true
	}
}

// TestMembershipChangesUnderLoad: a node joins, and another is stopped and
// forgotten, while clients on the others keep allocating; nothing repeats
// and the new node serves.
func TestMembershipChangesUnderLoad(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	c := testcluster.NewCollector()
	stop := make(chan struct{})
	wg := testcluster.Load(t, nodes[:2], c, stop)
	c.WaitCount(t, 20*time.Second, 100, "load before the membership changes")
	n4 := testcluster.Start(t, "n4", t.TempDir(), nodes.WaitLeader(t), nil)
	nodes[2].Stop()
	ctx := context.Background()
	wait.For(t, 10*time.Second, "FORGET n3 under load", func() (bool, string) {
		err := nodes[0].Client.Do(ctx, "CLUSTER", "FORGET", "n3").Err()
		return err == nil, fmt.Sprint(err)
	})
	more := testcluster.Load(t, testcluster.Cluster{n4}, c, stop)
	before := c.Count()
	c.WaitCount(t, 20*time.Second, before+100, "values after the membership changes")
	wait.For(t, 20*time.Second, "n4 serves", func() (bool, string) {
		return c.CountFrom("n4") > 0, fmt.Sprintf("errors %v", c.Errors())
	})
	close(stop)
	wg.Wait()
	more.Wait()
	// n4 applies the FORGET once it learns of its commit.
	wait.For(t, 10*time.Second, "n4 applies the FORGET of n3", func() (bool, string) {
		info, err := n4.Client.Do(ctx, "CLUSTER", "INFO").Text()
		return err == nil && strings.Contains(info, "\r\nmembers:3\r\n"), fmt.Sprintf("%v\n%s", err, info)
	})
	t.Logf("join of n4 and forget of n3 under load: %d values, no repeat; errors %v", c.Count(), c.Errors())
}

// TestConcurrentSetNXOneWins: SET NX sent at once through every node (the
// followers forward it) creates the tag exactly once.
func TestConcurrentSetNXOneWins(t *testing.T) {
	testproc.Long(t)
	nodes := testcluster.New(t, 3, nil)
	for round := range 5 {
		tag := fmt.Sprintf("orders%d", round)
		var wg sync.WaitGroup
		results := make([]any, 6)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := nodes[i%len(nodes)]
				v, err := n.Client.Do(context.Background(), "SET", tag, 1000000+i, "NX").Result()
				if err != nil && err != redis.Nil {
					results[i] = err
					return
				}
				results[i] = v
			}()
		}
		wg.Wait()
		oks := 0
		for _, r := range results {
			switch r {
			case "OK":
				oks++
			case nil:
			default:
				t.Fatalf("round %d: SET NX answered %v", round, r)
			}
		}
		if oks != 1 {
			t.Fatalf("round %d: %d SET NX succeeded, want exactly 1: %v", round, oks, results)
		}
	}
}

// TestSnapshotSoonAfterABurst: a start reads every log entry after the
// last snapshot, so a burst of entries past the threshold is snapshotted
// within cluster.DefaultSnapshotInterval's range (at most twice it), not
// minutes later: the log a restart finds stays short.
func TestSnapshotSoonAfterABurst(t *testing.T) {
	testproc.Long(t)
	n := testcluster.Start(t, "n1", t.TempDir(), nil, snapshotEvery(64))
	newTags(t, n.Client, "t", 200)
	wait.For(t, 2*cluster.DefaultSnapshotInterval+5*time.Second, "a snapshot after 200 entries past a threshold of 64", func() (bool, string) {
		list := snapshots(t, n.Dir)
		return len(list) > 0, fmt.Sprintf("%d snapshots", len(list))
	})
}
