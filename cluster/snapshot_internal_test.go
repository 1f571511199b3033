package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// manyTags is an fsm with n tags (one not UTF-8), allocated to two nodes,
// some SET, and a member.
func manyTags(t *testing.T, n int) *fsm {
	t.Helper()
	f, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	applyEntry(t, f, 1, joinEntry("a", 1000))
	applyManyTags(t, f, 1, n, [2]string{"a", "b"}, 0)
	return f
}

// applyManyTags applies, after index idx, allocations of n tags (tag:000000
// on, the eighth not UTF-8) to two nodes in turn, each with a boot of one to
// three shifted left by bootShift, then a SET of tag:000003.
func applyManyTags(t *testing.T, f *fsm, idx uint64, n int, nodes [2]string, bootShift uint) {
	t.Helper()
	for i := 0; i < n; i += 500 {
		e := newEntry(entryAllocBy).uvarint(uint64(min(500, n-i)))
		for j := i; j < min(i+500, n); j++ {
			tag := fmt.Sprintf("tag:%06d", j)
			if j == 7 {
				tag = "\xff\xfe not UTF-8"
			}
			e = e.string(tag).varint(int64(j%97 + 1)).string(nodes[j%2]).uvarint(uint64(j%3+1) << bootShift)
		}
		idx++
		applyEntry(t, f, idx, e)
	}
	applyEntry(t, f, idx+1, newEntry(entrySet).string("tag:000003").varint(5000))
}

// TestSnapshotStreamsTheStateOldBuildsRead: a streamed snapshot is the JSON
// snapshotState marshals (the shape every build reads), and a restore of it
// on another store gives the same state, tag count included.
func TestSnapshotStreamsTheStateOldBuildsRead(t *testing.T) {
	f := manyTags(t, 3000)
	state, err := f.stateJSON()
	if err != nil {
		t.Fatal(err)
	}
	var st snapshotState
	if err := st.UnmarshalJSON(state); err != nil {
		t.Fatal(err)
	}
	if len(st.Tags) != 3000 || st.Meta.TagCount != 3000 {
		t.Fatalf("the snapshot holds %d tags, counts %d, want 3000", len(st.Tags), st.Meta.TagCount)
	}
	whole, err := st.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole, state) {
		t.Fatalf("the streamed snapshot differs from the one JSON blob:\n%.300s\n%.300s", state, whole)
	}
	defer func(was int) { restoreBatchBytes = was }(restoreBatchBytes)
	restoreBatchBytes = 16 << 10
	g, err := newFSM(openStore(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(state))); err != nil {
		t.Fatal(err)
	}
	again, _ := g.stateJSON()
	if !bytes.Equal(again, state) || g.size() != 3000 {
		t.Fatalf("restored: %d tags, same state %v", g.size(), bytes.Equal(again, state))
	}
}

// TestRestoreCutAtAnyBatchIsRepairedByARerun: a restore stopped after any
// of its batches (a crash, a full disk) leaves a store that, opened again,
// has applied nothing, so that the next start restores Raft's snapshot
// again (restoreOnStart); and the rerun gives the snapshot's state, none
// of the tags the store held before left over.
func TestRestoreCutAtAnyBatchIsRepairedByARerun(t *testing.T) {
	src := manyTags(t, 3000)
	state, err := src.stateJSON()
	if err != nil {
		t.Fatal(err)
	}
	defer func(was int) { restoreBatchBytes = was }(restoreBatchBytes)
	defer func() { restoreCommitted = nil }()
	restoreBatchBytes = 32 << 10
	batches := 0
	restoreCommitted = func(n int) error { batches = n; return nil }
	scratch, _ := newFSM(openStore(t), 3)
	if err := scratch.Restore(io.NopCloser(bytes.NewReader(state))); err != nil {
		t.Fatal(err)
	}
	if batches < 3 {
		t.Fatalf("the restore took %d batches before its last, want several", batches)
	}
	for cut := 1; cut <= batches; cut++ {
		store := openStore(t)
		f, _ := newFSM(store, 3)
		applyEntry(t, f, 1, joinEntry("z", 1000))
		for i := range 50 { // tags the snapshot does not hold, at an index above its own
			applyEntry(t, f, uint64(10_000+i), newEntry(entryAlloc).uvarint(1).string(fmt.Sprintf("old:%d", i)).varint(9))
		}
		errCut := errors.New("cut")
		restoreCommitted = func(n int) error {
			if n == cut {
				return errCut
			}
			return nil
		}
		if err := f.Restore(io.NopCloser(bytes.NewReader(state))); !errors.Is(err, errCut) {
			t.Fatalf("cut at batch %d: %v", cut, err)
		}
		restoreCommitted = nil
		// The next start: the store as the cut left it, and Raft's snapshot.
		reopened, err := newFSM(store, 3)
		if err != nil {
			t.Fatalf("cut at batch %d, reopened: %v", cut, err)
		}
		if reopened.applied() != 0 || f.applied() != 0 {
			t.Fatalf("cut at batch %d: the store says it applied %d (in memory %d), want 0", cut, reopened.applied(), f.applied())
		}
		snaps := snapshotStoreWith(t, src.applied(), state)
		if err := restoreOnStart(reopened, snaps, raft.NewInmemStore()); err != nil {
			t.Fatalf("cut at batch %d, restore at start: %v", cut, err)
		}
		got, _ := reopened.stateJSON()
		var want snapshotState
		want.UnmarshalJSON(state)
		want.Meta.Applied = src.applied()
		wantJSON, _ := want.MarshalJSON()
		if !bytes.Equal(got, wantJSON) || reopened.size() != 3000 {
			t.Fatalf("cut at batch %d, restored again: %d tags, state as the snapshot's: %v", cut, reopened.size(), bytes.Equal(got, wantJSON))
		}
		if _, ok := reopened.tag("old:3"); ok {
			t.Fatalf("cut at batch %d: a tag of the store before the restore is left", cut)
		}
	}
}

// snapshotStoreWith is a Raft snapshot store holding state at index.
func snapshotStoreWith(t *testing.T, index uint64, state []byte) raft.SnapshotStore {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(t.TempDir(), 1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("a")
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(state); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return snaps
}

// TestStartReplaysTheLogBelowRaftsSnapshot: a store that lags Raft's
// snapshot (its last writes, not synced, lost) catches up from the log
// when the log holds the entries between, without reading the snapshot.
func TestStartReplaysTheLogBelowRaftsSnapshot(t *testing.T) {
	f, _ := newFSM(openStore(t), 3)
	logs := raft.NewInmemStore()
	var entries []*raft.Log
	for i := uint64(1); i <= 20; i++ {
		l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: newEntry(entryAlloc).uvarint(1).string(fmt.Sprintf("t%d", i%4)).varint(10)}
		if i == 20 {
			l.Type, l.Data = raft.LogNoop, nil
		}
		entries = append(entries, l)
	}
	logs.StoreLogs(entries)
	for _, l := range entries[:12] {
		f.Apply(l)
	}
	snaps := snapshotStoreWith(t, 20, []byte("not read"))
	if err := restoreOnStart(f, snaps, logs); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.tag("t3"); f.applied() != 19 || v != 50 {
		t.Fatalf("after the replay: applied %d, t3 at %d; want 19 and 50", f.applied(), v)
	}
}
