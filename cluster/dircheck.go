package cluster

// What a starting node checks of its data directory before Raft runs on it
// (docs/operations.md, "A damaged directory is refused"): the Raft log and the Pebble state must be the two
// halves of one node's state, or the start is refused with the file named
// and the remedy. Nothing is deleted or rebuilt here: a directory whose
// Raft state is empty holds nothing to lose, any other one must agree with
// Pebble.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"

	"idserver/persist"
)

// pebbleMember says what the Pebble state holds of a membership: a worker
// ID, or a state machine that applied log entries. "" when it holds none
// (a directory whose bootstrap or admission was cut short, or a new one).
func pebbleMember(store *persist.Store, f *fsm) (string, error) {
	worker, _, hasWorker, err := store.Worker()
	if err != nil {
		return "", err
	}
	applied := f.applied()
	switch {
	case hasWorker:
		return fmt.Sprintf("worker ID %d, state machine at Raft index %d", worker, applied), nil
	case applied > 0:
		return fmt.Sprintf("a state machine at Raft index %d", applied), nil
	}
	return "", nil
}

// checkRaftFile runs before raft.db is opened (which would create it): a
// damaged file is refused, and so is a missing one under a Pebble state
// that says the node was a member.
func checkRaftFile(cfg Config, f *fsm) error {
	path := filepath.Join(cfg.Dir, "raft", "raft.db")
	if err := checkBoltFile(path); err != nil {
		return fmt.Errorf("%w: %s is damaged (%v): this node's Raft log and vote cannot be read; %s",
			persist.ErrDamaged, path, err, persist.Remedy(cfg.NodeID))
	}
	what := "missing"
	if st, err := os.Stat(path); err == nil && st.Size() == 0 {
		what = "empty (0 bytes)"
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	member, err := pebbleMember(cfg.Store, f)
	if err != nil || member == "" {
		return err
	}
	return fmt.Errorf("%w: %s is %s, but %s says node %s was a member (%s): its Raft log and vote are lost; %s",
		persist.ErrDamaged, path, what, filepath.Join(cfg.Dir, "pebble"), cfg.NodeID, member, persist.Remedy(cfg.NodeID))
}

// checkRaftState compares the Raft state with the Pebble state and
// reports whether the Raft state is not empty (a restart). It reads raft.db
// read-only: a refused start leaves it as it was.
func checkRaftState(cfg Config, f *fsm, clusterID string, snaps raft.SnapshotStore) (bool, error) {
	path := filepath.Join(cfg.Dir, "raft", "raft.db")
	var logs interface {
		raft.LogStore
		raft.StableStore
	} = raft.NewInmemStore() // no file, or an empty one bbolt never wrote: no Raft state
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bolt.Options{ReadOnly: true, Timeout: time.Second}})
		if err != nil {
			return false, fmt.Errorf("%w: %s: %v; %s", persist.ErrDamaged, path, err, persist.Remedy(cfg.NodeID))
		}
		defer store.Close()
		logs = store
	}
	stable := logs
	pdir := filepath.Join(cfg.Dir, "pebble")
	existing, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v; %s", persist.ErrDamaged, path, err, persist.Remedy(cfg.NodeID))
	}
	member, err := pebbleMember(cfg.Store, f)
	if err != nil {
		return false, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v; %s", persist.ErrDamaged, path, err, persist.Remedy(cfg.NodeID))
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v; %s", persist.ErrDamaged, path, err, persist.Remedy(cfg.NodeID))
	}
	// Raft restores the newest snapshot that opens (its checksum holds),
	// then reads every entry after it, and panics on one it cannot decode,
	// of a type it does not know, or a configuration it cannot read, or on
	// one that is missing (above an older snapshot it fell back to, below
	// the first entry kept after the newest one). With snapshots of which
	// none opens, it does not start. Those entries are checked here, with
	// the last one, which Raft reads for its term wherever it lies, and
	// only those: the start reads no more of the log than Raft does. The
	// entries up to the snapshot Raft reads only to send a follower that
	// lags, and it sends the snapshot instead of one that is missing; one
	// that does not decode is read as missing (timedLogs.GetLog), so a gap
	// or a damaged entry there costs a follower a snapshot, never a refusal.
	snap, restorable, skipped := restorableSnapshot(snaps)
	if !restorable && skipped != "" {
		return false, fmt.Errorf("%w: %s: no snapshot of the Raft state opens%s; %s",
			persist.ErrDamaged, filepath.Join(cfg.Dir, "raft", "snapshots"), skipped, persist.Remedy(cfg.NodeID))
	}
	if !restorable && first > 1 {
		// With no snapshot Raft reads the log from entry 1.
		return false, fmt.Errorf("%w: %s begins at entry %d, and %s lists no snapshot of the entries below it (one whose meta.json cannot be read is not listed); %s",
			persist.ErrDamaged, path, first, filepath.Join(cfg.Dir, "raft", "snapshots"), persist.Remedy(cfg.NodeID))
	}
	from := first
	if restorable {
		// Raft reads the last entry at start too, for its term, also when
		// it lies at or below the snapshot.
		from = min(snap+1, last)
	}
	for i := from; i <= last && i > 0; i++ {
		err := checkLogEntry(logs, i)
		if err == nil {
			continue
		}
		if i < first {
			newest := "the newest snapshot listed" // a newer one removed, or its meta.json unreadable
			if skipped != "" {
				newest = "the newest snapshot does not open" + skipped + ", and the one that does"
			}
			return false, fmt.Errorf("%w: %s: %s, at index %d, needs the Raft log from entry %d, where %s begins at entry %d "+
				"(a newer snapshot removed, or its meta.json unreadable, is not listed); %s",
				persist.ErrDamaged, filepath.Join(cfg.Dir, "raft", "snapshots"), newest, snap, i, path, first, persist.Remedy(cfg.NodeID))
		}
		return false, fmt.Errorf("%w: %s: Raft log entry %d of %d..%d cannot be read (%v)%s; %s",
			persist.ErrDamaged, path, i, first, last, err, skipped, persist.Remedy(cfg.NodeID))
	}
	term, _ := stable.GetUint64([]byte("CurrentTerm"))
	if list, err := snaps.List(); err == nil && len(list) > 0 {
		last = max(last, list[0].Index)
	}
	_, layout := f.identity()
	cfg.Logger.Debug("data directory at start", "raft_state", existing, "raft_last_index", last, "raft_term", term,
		"cluster_id", clusterID, "pebble_applied", f.applied(), "pebble_member", member)
	switch {
	case existing && clusterID == "":
		return false, fmt.Errorf("%w: %s holds Raft state (log up to index %d, term %d) but %s holds no cluster identity: "+
			"the Pebble state was lost or replaced (pebble/ deleted, its write-ahead log removed, or made by an older idserver); %s",
			persist.ErrDamaged, path, last, term, pdir, persist.Remedy(cfg.NodeID))
	case !existing && member != "":
		return false, fmt.Errorf("%w: %s holds no Raft state, but %s says node %s was a member of cluster %s (%s): its Raft log and vote are lost; %s",
			persist.ErrDamaged, path, pdir, cfg.NodeID, clusterID, member, persist.Remedy(cfg.NodeID))
	case existing && f.applied() > last:
		return false, fmt.Errorf("%w: %s applied Raft index %d, but %s ends at index %d: the Raft log is older than the state machine "+
			"(one of them restored from another copy, or the log truncated); %s",
			persist.ErrDamaged, pdir, f.applied(), path, last, persist.Remedy(cfg.NodeID))
	case layout != "" && layout != cfg.Layout.String():
		return false, fmt.Errorf("%w: %s holds a cluster of layout [%s], this start asks for [%s]: start with the cluster's layout flags",
			persist.ErrLayoutMismatch, pdir, layout, cfg.Layout.String())
	}
	return existing, nil
}

// restorableSnapshot is the index of the snapshot Raft restores at start:
// the newest one that opens. skipped names the newer ones that do not.
func restorableSnapshot(snaps raft.SnapshotStore) (index uint64, ok bool, skipped string) {
	list, err := snaps.List()
	if err != nil {
		return 0, false, fmt.Sprintf(" (the snapshots cannot be listed: %v)", err)
	}
	for _, meta := range list {
		_, rc, err := snaps.Open(meta.ID)
		if err == nil {
			rc.Close()
			return meta.Index, true, skipped
		}
		skipped += fmt.Sprintf(" (snapshot %s, at index %d, does not open: %v)", meta.ID, meta.Index, err)
	}
	return 0, false, skipped
}

// checkLogEntry reads entry i as Raft will, and a command as far as the
// state machine's Apply panics on: empty, or of a type it does not know.
func checkLogEntry(logs raft.LogStore, i uint64) error {
	var l raft.Log
	if err := logs.GetLog(i, &l); err != nil {
		return err
	}
	return checkEntry(i, &l)
}

// checkEntry checks a decoded entry i as checkLogEntry does.
func checkEntry(i uint64, l *raft.Log) (err error) {
	switch {
	case l.Index != i:
		return fmt.Errorf("it says it is entry %d", l.Index)
	case l.Type > raft.LogConfiguration:
		return fmt.Errorf("unknown entry type %d", l.Type)
	case l.Type == raft.LogCommand && len(l.Data) == 0:
		return errors.New("an empty command")
	case l.Type == raft.LogCommand && applyTable[l.Data[0]] == nil:
		return fmt.Errorf("a command of unknown type %d", l.Data[0])
	case l.Type == raft.LogConfiguration:
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("configuration: %v", p)
			}
		}()
		raft.DecodeConfiguration(l.Data)
	}
	return nil
}

// applyAnswer is resp as the type its log entry's Apply answers. The state
// machine answers nil for an entry at or below the index it has applied
// (a replay); a proposal answered so means the state machine is ahead of
// the log it is applying, which checkRaftState refuses at start: an error
// here, never a panic.
func applyAnswer[T any](resp any, entry string) (T, error) {
	v, ok := resp.(T)
	if !ok {
		return v, noLeader(ErrNotApplied, "the state machine did not apply the %s entry (it answered %T): its state is ahead of the Raft log",
			entry, resp)
	}
	return v, nil
}
