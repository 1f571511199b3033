package cluster

// Backups and restores of a one-node cluster. A one-node cluster has
// nothing outside its disk to ask what it issued after a copy was taken, so
// a restore moves everything past what it could have issued since, as
// etcd's `snapshot restore --bump-revision` does: every tag skips a large
// amount (tags the copy does not hold start above it too), the node's time
// high-water moves past the restore's wall clock plus what the node may run
// ahead of its clock, and the cluster gets a new identity.
//
// A backup is an Image: the state machine as a Raft snapshot holds it and
// the node's own keys, taken consistently from a running node (CLUSTER
// BACKUP) or read from a copy of a data directory (ImageOf). Restore writes
// a new data directory from it: the node's keys in Pebble and a Raft
// snapshot holding the bumped state, which Raft restores at the first start.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"idserver/persist"
)

// Image is a node's state as a backup holds it.
type Image struct {
	Format       int    `json:"format"`   // imageFormat
	TakenUnixMS  int64  `json:"taken_ms"` // wall clock when it was taken (0 for a directory copy)
	NodeID       string `json:"node_id"`
	Layout       string `json:"layout"`
	ClusterID    string `json:"cluster_id"`
	Worker       int64  `json:"worker"`
	StartAboveMS int64  `json:"start_above_ms"`
	HighWaterMS  int64  `json:"high_water_ms"`
	Incarnation  uint64 `json:"incarnation"`
	// State is the state machine as a Raft snapshot holds it.
	State json.RawMessage `json:"state"`
}

const imageFormat = 1

// BackupFile is the file a backup directory holds its Image in.
const BackupFile = "idserver-backup.json"

// Backup is this node's Image, taken now: the state machine as a Raft
// snapshot holds it (from a Pebble snapshot) and the node's keys.
func (c *Cluster) Backup() ([]byte, error) {
	state, err := c.fsm.stateJSON()
	if err != nil {
		return nil, err
	}
	img, err := imageOfStore(c.cfg.Store)
	if err != nil {
		return nil, err
	}
	img.TakenUnixMS = c.cfg.Now().UnixMilli()
	img.State = json.RawMessage(state)
	return json.Marshal(img)
}

func imageOfStore(s *persist.Store) (Image, error) {
	img := Image{Format: imageFormat}
	var err error
	if img.NodeID, img.Layout, err = s.StoredIdentity(); err != nil {
		return img, err
	}
	if img.ClusterID, err = s.ClusterID(); err != nil {
		return img, err
	}
	var ok bool
	if img.Worker, img.StartAboveMS, ok, err = s.Worker(); err != nil {
		return img, err
	} else if !ok {
		return img, fmt.Errorf("%s holds no worker ID: it never served", s.Dir())
	}
	if img.HighWaterMS, err = s.HighWater(); err != nil {
		return img, err
	}
	img.Incarnation, err = s.Incarnation()
	return img, err
}

// ImageOf reads the Image of a copy of a data directory (made with cp -a,
// rsync, tar, a file-system snapshot): its node keys, and its state
// machine: the newer of the state in Pebble and the latest Raft snapshot,
// with the entries of its Raft log past it applied. (Pebble's state-machine
// writes are not synced, so in a copy of a running node it lags the log.)
// The copy must not be in use (its lock is taken); its Raft log is opened
// read-only.
func ImageOf(dir string) (Image, error) {
	s, err := persist.Open(dir)
	if err != nil {
		return Image{}, err
	}
	defer s.Close()
	img, err := imageOfStore(s)
	if err != nil {
		return img, err
	}
	f, err := newFSM(s, math.MaxInt64)
	if err != nil {
		return img, err
	}
	state, err := f.stateJSON()
	if err != nil {
		return img, err
	}
	applied := f.applied()
	rdir := filepath.Join(dir, "raft")
	if _, err := os.Stat(filepath.Join(rdir, "snapshots")); err == nil {
		snaps, err := raft.NewFileSnapshotStoreWithLogger(rdir, 2, hclog.NewNullLogger())
		if err != nil {
			return img, err
		}
		if list, err := snaps.List(); err != nil {
			return img, err
		} else if len(list) > 0 && list[0].Index > applied {
			_, rc, err := snaps.Open(list[0].ID)
			if err != nil {
				return img, fmt.Errorf("raft snapshot %s: %w", list[0].ID, err)
			}
			state, err = io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return img, fmt.Errorf("raft snapshot %s: %w", list[0].ID, err)
			}
			applied = list[0].Index
		}
	}
	if state, err = replayLog(filepath.Join(rdir, "raft.db"), state, applied); err != nil {
		return img, err
	}
	img.State = json.RawMessage(state)
	return img, nil
}

// replayLog applies the entries of the Raft log at path after index
// applied to state (a Raft snapshot's, in either shape), in a scratch
// state machine, and returns the result as JSON. A log that does not reach
// back to applied+1 is not applied.
func replayLog(path string, state []byte, applied uint64) (_ []byte, err error) {
	if _, err := os.Stat(path); err != nil {
		return jsonState(state)
	}
	logs, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer logs.Close()
	first, err := logs.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return state, err
	}
	if last <= applied || first > applied+1 {
		return jsonState(state)
	}
	f, done, err := scratchFSM(state)
	if err != nil {
		return nil, err
	}
	defer done()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %v", path, p)
		}
	}()
	for i := applied + 1; i <= last; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return nil, fmt.Errorf("%s: entry %d: %w", path, i, err)
		}
		f.Apply(&l)
	}
	return f.stateJSON()
}

// scratchFSM is a state machine holding state (a Raft snapshot's bytes,
// in either shape) on a temporary store that done removes.
func scratchFSM(state []byte) (_ *fsm, done func(), err error) {
	scratch, err := os.MkdirTemp("", "idserver-restore-")
	if err != nil {
		return nil, nil, err
	}
	s, err := persist.Open(scratch)
	if err != nil {
		os.RemoveAll(scratch)
		return nil, nil, err
	}
	done = func() { s.Close(); os.RemoveAll(scratch) }
	f, err := newFSM(s, math.MaxInt64)
	if err == nil {
		f.log = slog.New(slog.DiscardHandler) // a command's scratch work, not a server's
		err = f.Restore(io.NopCloser(bytes.NewReader(state)))
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	return f, done, nil
}

// jsonState is a Raft snapshot's state in the JSON shape a backup holds:
// as it is, or read from the compact shape (snapshot.go).
func jsonState(state []byte) ([]byte, error) {
	if !bytes.HasPrefix(state, []byte(compactMagic)) {
		return state, nil
	}
	f, done, err := scratchFSM(state)
	if err != nil {
		return nil, err
	}
	defer done()
	return f.stateJSON()
}

// RestoreOptions say how far a restore moves the state.
type RestoreOptions struct {
	// SkipValues: every tag, and every tag the image does not hold, skips
	// this many values past its high-water.
	SkipValues int64
	// AheadMS: the node's time high-water moves this far past the later of
	// Now and the image's high-water: it must cover --window, --max-borrow
	// and any error of the clock.
	AheadMS int64
	// FloorUnixMS: the node's IDs start above this wall time (Unix ms) too:
	// past what a node restored earlier from the same backup could have
	// issued (0: none).
	FloorUnixMS int64
	// WorkerLease is the node's first lease, from the moved high-water.
	WorkerLease time.Duration
	Now         time.Time
}

// RestoreResult says what a restore did.
type RestoreResult struct {
	NodeID       string
	ClusterID    string // the new cluster identity
	Tags         int
	TagBase      int64 // tags the image does not hold start above this
	StartAboveMS int64 // the generator starts above this ID time
	Epoch        int64 // the layout's epoch, Unix ms: StartAboveMS+Epoch is a wall time
}

// CheckRestore makes Restore's checks of img and dir without writing
// anything: a restore it refuses would be refused by Restore too, so a
// caller can check before it records the restore.
func CheckRestore(img Image, dir string) error {
	_, err := checkRestore(img, dir)
	return err
}

// checkRestore is CheckRestore, also returning the image's state.
func checkRestore(img Image, dir string) (snapshotState, error) {
	var st snapshotState
	if img.Format != imageFormat {
		return st, fmt.Errorf("backup format %d, this idserver reads %d", img.Format, imageFormat)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return st, fmt.Errorf("%s is not empty: restore into a new directory (move the old one aside first)", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	if err := json.Unmarshal(img.State, &st); err != nil {
		return st, fmt.Errorf("%w: the backup's state: %v", persist.ErrCorrupt, err)
	}
	self, ok := st.Meta.Members[img.NodeID]
	switch {
	case !ok || self == nil:
		return st, fmt.Errorf("the backup's node %s is not a member of its own state (a joiner never admitted?): nothing to restore", img.NodeID)
	case len(st.Meta.Members) > 1:
		return st, fmt.Errorf("the backup is of a member of a %d-node cluster: start that member from the copy as it is "+
			"(the cluster tells it what it committed and it starts above it), or start it on an empty --dir with --join", len(st.Meta.Members))
	case self.Worker != img.Worker:
		return st, fmt.Errorf("%w: the backup's state gives node %s worker %d, its keys %d", persist.ErrCorrupt, img.NodeID, self.Worker, img.Worker)
	}
	return st, nil
}

// Restore writes a new data directory dir from img, moved past what the
// node could have issued since img was taken. dir must not exist or be
// empty. The image must be of a one-node cluster: a member of a larger
// cluster restarts from a copy as it is (the cluster tells it what it
// committed), or joins again on an empty directory.
func Restore(img Image, dir string, opt RestoreOptions) (RestoreResult, error) {
	var res RestoreResult
	st, err := checkRestore(img, dir)
	if err != nil {
		return res, err
	}
	self := st.Meta.Members[img.NodeID]
	epoch, err := epochOf(img.Layout)
	if err != nil {
		return res, err
	}
	nowMS := opt.Now.UnixMilli() - epoch
	skip := func(v, by int64) int64 { return v + min(by, math.MaxInt64-v) }

	// The bump: every tag, and the base of those the image does not hold.
	for tag, t := range st.Tags {
		t.MaxID = skip(t.high(), opt.SkipValues)
		t.Bound = t.MaxID // all of it may have been issued
		t.Rev++
		st.Tags[tag] = t
	}
	st.Meta.TagBase = skip(st.Meta.TagBase, opt.SkipValues)
	startAbove := max(nowMS, img.HighWaterMS, img.StartAboveMS, opt.FloorUnixMS-epoch) + opt.AheadMS
	for w, ws := range st.Meta.Workers {
		ws.LeaseEnd = max(ws.LeaseEnd, startAbove)
		if w == img.Worker {
			ws.LeaseEnd += opt.WorkerLease.Milliseconds()
		}
	}
	st.Meta.Cluster = newClusterID()
	st.Meta.Applied = max(st.Meta.Applied, 1)
	state, err := json.Marshal(st)
	if err != nil {
		return res, err
	}

	// The node's keys.
	s, err := persist.Open(dir)
	if err != nil {
		return res, err
	}
	defer s.Close()
	if _, err := s.NodeID(img.NodeID); err != nil {
		return res, err
	}
	if err := s.EnsureLayout(img.Layout); err != nil {
		return res, err
	}
	if err := s.SetWorkerSync(img.Worker, startAbove); err != nil {
		return res, err
	}
	if err := s.SetIncarnationSync(max(img.Incarnation, self.Incarnation)); err != nil {
		return res, err
	}
	if err := s.SetClusterIDSync(st.Meta.Cluster); err != nil {
		return res, err
	}

	// Raft: an empty log and a snapshot of the bumped state, with this
	// node the only voter.
	rdir := filepath.Join(dir, "raft")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return res, err
	}
	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(rdir, "raft.db")})
	if err != nil {
		return res, err
	}
	defer logs.Close()
	const term = 1
	if err := logs.SetUint64([]byte("CurrentTerm"), term); err != nil {
		return res, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(rdir, 2, hclog.NewNullLogger())
	if err != nil {
		return res, err
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(img.NodeID), Address: raft.ServerAddress(self.RaftAddr)}}}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(self.RaftAddr))
	sink, err := snaps.Create(raft.SnapshotVersionMax, st.Meta.Applied, term, conf, st.Meta.Applied, trans)
	if err != nil {
		return res, err
	}
	if _, err := sink.Write(state); err != nil {
		sink.Cancel()
		return res, err
	}
	if err := sink.Close(); err != nil {
		return res, err
	}
	return RestoreResult{NodeID: img.NodeID, ClusterID: st.Meta.Cluster, Tags: len(st.Tags), TagBase: st.Meta.TagBase, StartAboveMS: startAbove, Epoch: epoch}, nil
}

// epochOf reads the epoch (ms since 1970) out of a stored layout
// (engine.Layout.String: "epoch=2025-01-01T00:00:00Z time-bits=41 ...").
func epochOf(layout string) (int64, error) {
	var epoch string
	if _, err := fmt.Sscanf(layout, "epoch=%s", &epoch); err != nil {
		return 0, fmt.Errorf("the backup's layout %q: %v", layout, err)
	}
	e, err := time.Parse(time.RFC3339Nano, epoch)
	if err != nil {
		return 0, fmt.Errorf("the backup's layout %q: %v", layout, err)
	}
	return e.UnixMilli(), nil
}
