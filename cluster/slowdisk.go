package cluster

// A slow disk: this node times every sync of its disk (the Raft log store's
// writes, each an fdatasync of raft.db, and Pebble's synced writes) and
// every entry it commits as leader. A sync slower than Timing.SlowSync,
// finished or still running, is logged (a WARN line at most every
// slowDiskLogEvery, naming the duration) and counted; a leader whose syncs
// are slow twice within slowDiskWindow hands its leadership to a healthy
// voter: its log writes hold up every commit, so every member's lease
// renewals and segment refills wait on its disk, while another leader
// would commit without it.

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

const (
	// slowDiskLogEvery is the most often a slow disk is logged.
	slowDiskLogEvery = 10 * time.Second
	// slowDiskWindow: two slow syncs within it make a slow disk, not a blip.
	slowDiskWindow = 30 * time.Second
	// latencySpan is how far back DiskSyncSeconds and RaftCommitSeconds
	// look: at least one scrape interval.
	latencySpan = 20 * time.Second
)

// diskWatch times this node's syncs and commits.
type diskWatch struct {
	threshold time.Duration
	now       func() time.Time

	mu       sync.Mutex
	next     uint64
	running  map[uint64]*syncRun
	sync     spanMax // longest sync
	commit   spanMax // longest commit
	slow     int64   // syncs past the threshold, ever
	recent   []time.Time
	handoffs int64
	logged   time.Time // the last WARN line
	unlogged int64     // slow syncs since it
}

// syncRun is one sync under way.
type syncRun struct {
	what    string
	start   time.Time
	counted bool // already counted as slow, while it ran
}

// spanMax is the largest value seen in the current and the previous
// latencySpan/2: the largest in the last latencySpan/2 to latencySpan.
type spanMax struct {
	from      time.Time
	cur, prev time.Duration
}

func (m *spanMax) add(now time.Time, d time.Duration) {
	m.roll(now)
	m.cur = max(m.cur, d)
}

func (m *spanMax) roll(now time.Time) {
	switch half := latencySpan / 2; {
	case now.Sub(m.from) >= 2*half:
		m.from, m.cur, m.prev = now, 0, 0
	case now.Sub(m.from) >= half:
		m.from, m.cur, m.prev = m.from.Add(half), 0, m.cur
	}
}

func (m *spanMax) get(now time.Time) time.Duration {
	m.roll(now)
	return max(m.cur, m.prev)
}

func newDiskWatch(threshold time.Duration, now func() time.Time) *diskWatch {
	return &diskWatch{threshold: threshold, now: now, running: map[uint64]*syncRun{}}
}

// begin times one sync of what; the function it returns ends it.
func (w *diskWatch) begin(what string) (done func()) {
	w.mu.Lock()
	w.next++
	id := w.next
	run := &syncRun{what: what, start: w.now()}
	w.running[id] = run
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		now := w.now()
		took := now.Sub(run.start)
		delete(w.running, id)
		w.sync.add(now, took)
		if took > w.threshold && !run.counted {
			w.countSlow(now)
		}
		w.mu.Unlock()
	}
}

// committed records how long an entry this leader proposed took to commit
// and apply.
func (w *diskWatch) committed(took time.Duration) {
	w.mu.Lock()
	w.commit.add(w.now(), took)
	w.mu.Unlock()
}

// countSlow counts one slow sync; w.mu is held.
func (w *diskWatch) countSlow(now time.Time) {
	w.slow++
	w.unlogged++
	w.recent = append(w.recent, now)
}

// slowSync is what check found: a sync past the threshold.
type slowSync struct {
	what    string
	took    time.Duration
	running bool
	count   int64 // slow syncs since the last line
}

// check counts the syncs still running past the threshold, and returns
// the slowest sync to log (ok false when nothing is to be logged now) and
// whether the disk is slow: two slow syncs within slowDiskWindow.
func (w *diskWatch) check() (log slowSync, ok, slowDisk bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for _, run := range w.running {
		took := now.Sub(run.start)
		if took > w.threshold && !run.counted {
			run.counted = true
			w.countSlow(now)
		}
		if took > log.took {
			log = slowSync{what: run.what, took: took, running: true}
		}
	}
	if log.took <= w.threshold {
		log = slowSync{what: "a sync", took: w.sync.get(now)}
	}
	for len(w.recent) > 0 && now.Sub(w.recent[0]) > slowDiskWindow {
		w.recent = w.recent[1:]
	}
	if w.unlogged > 0 && now.Sub(w.logged) >= slowDiskLogEvery {
		log.count, ok = w.unlogged, true
		w.logged, w.unlogged = now, 0
	}
	return log, ok, len(w.recent) >= 2
}

// handedOff starts the count of slow syncs again after a handoff.
func (w *diskWatch) handedOff() {
	w.mu.Lock()
	w.recent = nil
	w.handoffs++
	w.mu.Unlock()
}

// DiskStatus is this node's disk and commit latency.
type DiskStatus struct {
	// SyncSeconds is the longest sync of the last 10 to 20 seconds, a
	// sync still running included.
	SyncSeconds float64
	// CommitSeconds is the longest time an entry this node proposed as
	// leader took to commit and apply, over the same span.
	CommitSeconds float64
	SlowSyncs     int64   // syncs slower than Threshold, since the start
	Handoffs      int64   // leaderships handed to another voter for a slow disk
	Threshold     float64 // Timing.SlowSync, seconds
}

func (w *diskWatch) status() DiskStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	longest := w.sync.get(now)
	for _, run := range w.running {
		longest = max(longest, now.Sub(run.start))
	}
	return DiskStatus{SyncSeconds: longest.Seconds(), CommitSeconds: w.commit.get(now).Seconds(),
		SlowSyncs: w.slow, Handoffs: w.handoffs, Threshold: w.threshold.Seconds()}
}

// watchDisk logs a slow disk, and hands a leadership on a slow disk to a
// healthy voter, until the cluster closes.
func (c *Cluster) watchDisk() {
	defer c.stopped.Done()
	tick := time.NewTicker(max(c.timing.SlowSync/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		slow, logIt, slowDisk := c.disk.check()
		if logIt {
			verb := "took"
			if slow.running {
				verb = "has been running for"
			}
			c.log.Warn("slow disk: "+slow.what+" "+verb+" "+slow.took.Round(time.Millisecond).String(),
				"sync_seconds", slow.took.Seconds(), "threshold", c.timing.SlowSync.String(), "slow_syncs", slow.count,
				"leader", c.IsLeader(), "dir", c.cfg.Dir)
		}
		if slowDisk && c.IsLeader() {
			c.handOff()
		}
	}
}

// handOff hands this leadership to the healthy voter the leader heard from
// last, if there is one, and says so.
func (c *Cluster) handOff() {
	var to *MemberHealth
	voters := map[string]raft.ServerAddress{}
	if cf := c.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			if s.Suffrage == raft.Voter && string(s.ID) != c.cfg.NodeID {
				voters[string(s.ID)] = s.Address
			}
		}
	}
	for id, h := range c.memberHealth() {
		if _, ok := voters[id]; ok && h.Healthy && (to == nil || h.LastContactMS < to.LastContactMS) {
			to = &h
		}
	}
	if to == nil {
		c.log.Warn("slow disk: this leader's syncs are slow, and no other voter is healthy to take over", "threshold", c.timing.SlowSync.String())
		c.disk.handedOff()
		return
	}
	c.log.Warn("slow disk: handing the leadership to a healthy voter", "to", to.Node, "threshold", c.timing.SlowSync.String())
	c.disk.handedOff()
	// raft.LeadershipTransfer waits for this leader's loop, which waits on
	// the slow disk (each log write, and each batch the state machine,
	// itself syncing, has not taken yet): seconds to tens of seconds. The
	// TimeoutNow request it would end with is sent at once instead: the
	// voter stands for election now, as a transfer's target, and the
	// others vote for it if its log is as complete as theirs; otherwise it
	// keeps standing, and this leader steps down on seeing its higher term.
	// An election is safe whenever it happens.
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(c.cfg.NodeID),
		Addr: c.trans.EncodePeer(raft.ServerID(c.cfg.NodeID), c.trans.LocalAddr())}
	if err := c.trans.TimeoutNow(raft.ServerID(to.Node), voters[to.Node], &raft.TimeoutNowRequest{RPCHeader: header}, &raft.TimeoutNowResponse{}); err != nil {
		c.log.Warn("slow disk: the healthy voter did not take the handoff", "to", to.Node, "err", err)
	}
}

// Disk reports this node's disk and commit latency.
func (c *Cluster) Disk() DiskStatus { return c.disk.status() }

// timedLogs is the Raft log and stable store with every write timed: each
// is a bbolt transaction that ends with an fdatasync of raft.db.
type timedLogs struct {
	*raftboltdb.BoltStore
	disk  *diskWatch
	snaps raft.SnapshotStore
	log   *slog.Logger
}

// GetLog reads entry i. An entry at or below the newest snapshot that
// cannot be read or is not what it should be (checkEntry) is answered as
// missing, with an error logged: Raft reads those entries only to send a
// follower that lags, and sends it the snapshot, which holds them, instead.
// Above the snapshot the error is Raft's to see, as the store answers it.
func (l timedLogs) GetLog(i uint64, entry *raft.Log) error {
	err := l.BoltStore.GetLog(i, entry)
	if err == nil {
		err = checkEntry(i, entry)
	}
	if err == nil || errors.Is(err, raft.ErrLogNotFound) || l.snaps == nil {
		return err
	}
	list, lerr := l.snaps.List()
	if lerr != nil || len(list) == 0 || i > list[0].Index {
		return err
	}
	l.log.Error("a Raft log entry at or below the snapshot cannot be read: a follower that needs it is sent the snapshot",
		"index", i, "snapshot_index", list[0].Index, "err", err)
	return raft.ErrLogNotFound
}

func (l timedLogs) StoreLog(log *raft.Log) error {
	defer l.disk.begin("a write of the Raft log")()
	return l.BoltStore.StoreLog(log)
}

func (l timedLogs) StoreLogs(logs []*raft.Log) error {
	defer l.disk.begin("a write of the Raft log")()
	return l.BoltStore.StoreLogs(logs)
}

func (l timedLogs) DeleteRange(min, max uint64) error {
	defer l.disk.begin("a compaction of the Raft log")()
	return l.BoltStore.DeleteRange(min, max)
}

func (l timedLogs) Set(k, v []byte) error {
	defer l.disk.begin("a write of the Raft term and vote")()
	return l.BoltStore.Set(k, v)
}

func (l timedLogs) SetUint64(k []byte, v uint64) error {
	defer l.disk.begin("a write of the Raft term and vote")()
	return l.BoltStore.SetUint64(k, v)
}
