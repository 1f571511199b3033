package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"idserver/engine"
	"idserver/persist"
)

// Log entry types: one type byte, then the payload.
const (
	entryAlloc  byte = 1 // group of (tag, n[, node, boot]): allocate n values of each (node and boot absent in old entries)
	entrySet    byte = 2 // tag, v[, cond[, rev]]: set the tag to v (cond: setNX, setXX; rev: see applySet; absent in old entries)
	entryJoin   byte = 3 // node ID, raft address, RESP address, now ms, lease ms[, zone[, boot]]: a new member, with a worker ID and its first lease
	entryForget byte = 4 // node ID: gone for good, its worker ID free for reuse above its last lease
	// 5 is retired: this build writes none, and no other entry takes the number.
	entryInit  byte = 6 // cluster ID, layout[, tag format]: the cluster's identity, once, at bootstrap (no tag format: tagFormatJSON)
	entryLease byte = 7 // node ID, worker ID, end ms[, incarnation]: extend the node's lease on its worker ID (incarnation: incarnation.go)
	entryAddrs byte = 8 // node ID, raft address, RESP address[, zone]: a member's new addresses (and zone)
	// entryRecover: node ID, now ms, value skip, time skip, new cluster ID:
	// the node restarted the cluster alone after the quorum was lost for good
	// (RecoverCluster).
	entryRecover byte = 9
	// entryAllocBy: group of (tag, n, node, boot): entryAlloc, naming the
	// node and its process boot each allocation is for.
	entryAllocBy byte = 10
	// entryPublicKey: key: the cluster's public-ID key (engine.PublicIDs),
	// made by the leader that proposes it; the first to commit stays.
	entryPublicKey byte = 11
	// 12 and 13 were never used (left to branches that added entries at once).
	// entryFresh: node ID, the worker it issued on, now ms, lease ms: the
	// node takes a fresh worker ID whose previous lease ended below now, and
	// retires the one it holds (freshworker.go).
	entryFresh byte = 14
	// entryMaxTags: n: the cluster's bound on the number of tags, 0 for
	// none (tagbound.go).
	entryMaxTags byte = 15
	// entryFloors: count, then (tag, v, rev) count times: raise each tag to
	// at least v, all or none (floors.go).
	entryFloors byte = 16
	// entryAllocRuns: count, then runs of (node, boot, k, k times (tag,
	// n)) holding count items in all: entryAllocBy with each node and boot
	// written once per run (allocruns.go).
	entryAllocRuns byte = 17
)

// Keys of the state machine in Pebble. fsmPrefix keys are replaced whole
// on Restore.
const (
	fsmPrefix  = "fsm/"
	keyState   = "fsm/state"
	keyTagBase = "fsm/tag/"
)

// tagState is one tag: the last value allocated to any node, and the floor
// from SET. Values handed out are above both.
//
// It also keeps what a SET needs to lower the tag safely (values reserved
// but never issued do not count: docs/commands.md, SET): Rev changes with every
// allocation and SET, so a SET commits only over the state it was checked
// against; Nodes holds what each node was last allocated; Bound is a value
// that may have been issued by nodes no longer tracked (allocations from
// before tracking, or past a --recover).
type tagState struct {
	MaxID int64                `json:"max_id"`
	Floor int64                `json:"floor"`
	Rev   uint64               `json:"rev,omitempty"`
	Bound int64                `json:"bound,omitempty"`
	Nodes map[string]nodeAlloc `json:"nodes,omitempty"`
}

// nodeAlloc is what one node was allocated of a tag: the last value of its
// latest allocation, in its process Boot, and the highest value allocated
// to it in earlier processes, which it may have issued and cannot tell.
type nodeAlloc struct {
	Boot   uint64 `json:"boot"`
	Last   int64  `json:"last"`
	Before int64  `json:"before,omitempty"`
}

// fenced is what a member answered a SET's fence: the largest value of the
// tag it handed out in its process boot.
type fenced struct {
	Issued int64
	Boot   uint64
}

// issuedBound is the largest value of t that may have been issued to a
// client, given what every member answered its fence, and who may have
// issued it. A member that answered from the process its latest allocation
// went to counts what it handed out; any other node, everything it was
// given.
func (t tagState) issuedBound(answers map[string]fenced) (int64, string) {
	bound, who := t.Bound, fmt.Sprintf("values up to %d may have been issued by nodes no longer tracked (allocated by an older version, or past a --recover)", t.Bound)
	raise := func(v int64, why string) {
		if v > bound {
			bound, who = v, why
		}
	}
	for node, a := range answers {
		raise(a.Issued, fmt.Sprintf("node %s issued %d", node, a.Issued))
	}
	for node, n := range t.Nodes {
		raise(n.Before, fmt.Sprintf("node %s was given values up to %d before it restarted, and may have issued them", node, n.Before))
		if a, ok := answers[node]; !ok || a.Boot != n.Boot || n.Boot == 0 { // (0: a node too old to say)
			raise(n.Last, fmt.Sprintf("node %s was given values up to %d and has restarted or left since, so it may have issued them", node, n.Last))
		}
	}
	return bound, who
}

// issuedBefore is the part of issuedBound a SET can know before it fences:
// values members answered they issued, the bound of untracked nodes and
// what nodes were given before they restarted. Each term is also in
// issuedBound of any later fence's answers, so it is never above it.
func (t tagState) issuedBefore(issued map[string]int64) (int64, string) {
	bound, who := t.Bound, fmt.Sprintf("values up to %d may have been issued by nodes no longer tracked (allocated by an older version, or past a --recover)", t.Bound)
	raise := func(v int64, why string) {
		if v > bound {
			bound, who = v, why
		}
	}
	for node, v := range issued {
		raise(v, fmt.Sprintf("node %s issued %d", node, v))
	}
	for node, n := range t.Nodes {
		raise(n.Before, fmt.Sprintf("node %s was given values up to %d before it restarted, and may have issued them", node, n.Before))
	}
	return bound, who
}

func (t tagState) high() int64 { return max(t.MaxID, t.Floor) }

// member is a node of the cluster.
type member struct {
	Worker   int64  `json:"worker"`
	RaftAddr string `json:"raft_addr"`
	RESPAddr string `json:"resp_addr"`
	Zone     string `json:"zone,omitempty"` // --zone: autopilot spreads voters over zones
	// JoinBoot is the process that joined (its boot), and StartAboveMS what
	// its join answered: the same process asking again, its first answer
	// lost, gets the same answer.
	JoinBoot     uint64 `json:"join_boot,omitempty"`
	StartAboveMS int64  `json:"start_above_ms,omitempty"`
	// Incarnation is the latest start of the node its lease renewals
	// carried (incarnation.go): a start from a directory that says less runs
	// on a restored copy.
	Incarnation uint64 `json:"incarnation,omitempty"`
	// Retired: worker IDs the node issued on before its clock went back
	// and it took a fresh one (freshworker.go), held until their leases end.
	Retired []int64 `json:"retired,omitempty"`
}

// workerState is one worker ID: who holds it, and the end of the lease its
// holder was last granted, in ID time (ms since the layout's epoch). The
// holder issues only IDs whose time is below LeaseEnd; a forgotten holder's
// ID is given to a new node that starts above LeaseEnd.
type workerState struct {
	Node      string `json:"node"`
	LeaseEnd  int64  `json:"lease_end"`
	Forgotten bool   `json:"forgotten"`
}

// meta is the small part of the state, kept under one key.
type meta struct {
	Applied uint64                 `json:"applied"`
	Cluster string                 `json:"cluster"` // identity, from entryInit
	Layout  string                 `json:"layout"`  // ID layout and epoch, cluster-wide
	Members map[string]*member     `json:"members"`
	Workers map[int64]*workerState `json:"workers"`
	// PublicKey is the public-ID key, from entryPublicKey: in the store and
	// every snapshot, so whoever reads a data directory can reverse public IDs.
	PublicKey []byte `json:"public_key,omitempty"`
	// Departed is the lease end of each member removed (FORGET, autopilot)
	// whose lease may not have ended: a SET waits for it. A join prunes
	// the ones that ended before its time.
	Departed map[string]int64 `json:"departed,omitempty"`
	// TagBase: a tag this state does not hold starts above it. A restore
	// (restore.go) raises it, since the node it restores may have created
	// tags after the copy was taken.
	TagBase int64 `json:"tag_base,omitempty"`
	// MaxTags is the bound on the number of tags an entryMaxTags set:
	// 0 when none did (the bound is DefaultMaxTags), -1 for no bound.
	MaxTags int `json:"max_tags,omitempty"`
	// TagCount is the number of tags the state holds. A state written
	// without it (0) is counted when opened, and a restore counts the tags
	// it writes.
	TagCount int `json:"tag_count,omitempty"`
	// TagFormat is how tag records and Raft snapshots are written
	// (tagrecord.go): tagFormatCompact in a cluster whose identity a build
	// that reads it stored, tagFormatJSON (what every build reads) in one
	// an older build created.
	TagFormat int `json:"tag_format,omitempty"`
	// Shapes is the newest log shape (logShapes) of an entry the log has
	// held: 1 once it committed an entryFloors or an entryMaxTags, which
	// older builds do not read. It never goes down (shapesNeeded).
	Shapes int `json:"shapes,omitempty"`
}

// allocItem is one request in an entryAlloc, and allocResult its answer.
type allocItem struct {
	Tag  string
	N    int64
	Node string `json:"-"` // set by the leader from the request
	Boot uint64 `json:"-"`
}

type allocResult struct {
	First, Last int64
	Err         error
}

// SET conditions as entrySet carries them: a SET NX or XX is decided in
// Apply, so two concurrent SET NX cannot both succeed.
const (
	setAlways byte = 0
	setNX     byte = 1 // only a tag that does not exist
	setXX     byte = 2 // only a tag that exists
)

var setConds = map[string]byte{"": setAlways, "NX": setNX, "XX": setXX}

// errMoved answers a SET whose tag changed after the leader checked it;
// the leader checks it again.
var errMoved = errors.New("the tag moved while the SET was checked")

// setResult answers entrySet: the high-water before it, whether the tag
// existed, and the refusal when v is below the high-water. A SET whose
// condition failed changes nothing and has no Err.
type setResult struct {
	Old     int64
	Existed bool
	Err     error
}

// joinResult answers entryJoin.
type joinResult struct {
	Worker       int64
	StartAboveMS int64 // the forgotten previous holder's last lease end
	LeaseEndMS   int64 // the new holder's first lease
	Err          error
}

// changes is what one Apply changed that others watch. Apply collects it
// under the state machine's lock and publishes it after releasing it, so
// the lock is never held while calling out.
type changes struct {
	members bool
}

// fsm is the Raft state machine: tags, members, worker IDs. Pebble is the
// store of record of the tags (one key each, read where needed); meta, the
// small rest, is also kept in memory. Apply is deterministic: no clock, no
// randomness, no I/O beyond the state store.
type fsm struct {
	store     *persist.Store
	maxWorker int64
	reserved  []engine.WorkerRange // worker IDs no member is given (reserved.go)
	log       *slog.Logger
	stop      <-chan struct{}       // the cluster closing: an apply waiting for disk space gives up
	full      atomic.Pointer[error] // why an apply waits for disk space (nil when none waits)
	room      func() error          // whether the disk has room for an apply (store.Room)

	mu   sync.RWMutex
	meta meta
	// pending holds the tags the entry being applied has written: its
	// batch is committed after the lock is released, and a tag it writes
	// twice reads its own first write. Empty between applies.
	pending map[string]tagState

	// restoreMu: one Restore at a time.
	restoreMu sync.Mutex

	// members is a copy of meta.Members, replaced after each Apply that
	// changes them: readers (the leader's address, peers) take no lock.
	members atomic.Pointer[map[string]member]

	// published is the last index whose changes were published; pubCh is
	// closed when it moves.
	pubMu     sync.Mutex
	published uint64
	pubCh     chan struct{}
}

func newFSM(store *persist.Store, maxWorker int64) (*fsm, error) {
	f := &fsm{store: store, maxWorker: maxWorker, log: slog.Default(), room: store.Room, pubCh: make(chan struct{})}
	f.reset()
	if v, ok, err := store.Get(keyState); err != nil {
		return nil, err
	} else if ok {
		if err := json.Unmarshal(v, &f.meta); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", persist.ErrCorrupt, keyState, err)
		}
	}
	if f.meta.TagCount == 0 { // a state written before the count, or with no tag
		n, err := store.Count(keyTagBase)
		if err != nil {
			return nil, err
		}
		f.meta.TagCount = n
	}
	f.published = f.meta.Applied
	f.publishMembers()
	return f, nil
}

func (f *fsm) reset() {
	f.meta = meta{Members: map[string]*member{}, Workers: map[int64]*workerState{}}
	f.pending = map[string]tagState{}
}

// stored is tag's state: the entry being applied's write of it, or the
// store's. The caller holds the lock. A store that cannot be read stops
// the process, as one that cannot be written does (commit): the replicas'
// states would otherwise diverge.
func (f *fsm) stored(tag string) (tagState, bool) {
	if t, ok := f.pending[tag]; ok {
		return t, true
	}
	v, ok, err := f.store.Lookup(keyTagBase + tag)
	if err != nil {
		panic(fmt.Sprintf("cluster: cannot read the state machine: %v", err))
	}
	if !ok {
		return tagState{}, false
	}
	t, err := decodeTag(v)
	if err != nil {
		panic(fmt.Sprintf("cluster: %v: %s%s: %v", persist.ErrCorrupt, keyTagBase, tag, err))
	}
	return t, true
}

// putTag writes tag's state in the entry's batch; existed says whether
// the state held the tag before. The caller holds the lock.
func (f *fsm) putTag(b *persist.Batch, tag string, t tagState, existed bool) {
	if !existed {
		f.meta.TagCount++
	}
	f.pending[tag] = t
	b.Set(keyTagBase+tag, encodeTag(t, f.meta.TagFormat))
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("cluster: empty log entry at index %d", l.Index))
	}
	if !f.waitRoom(l.Index) {
		return noLeader(ErrNotApplied, "closing with entry %d unapplied", l.Index) // applied again at the next start
	}
	var ch changes
	resp, batch := f.applyLocked(l, &ch)
	if batch != nil && !f.commit(l.Index, batch) {
		return noLeader(ErrNotApplied, "closing with entry %d unstored", l.Index) // applied again at the next start
	}
	f.publish(l.Index, &ch)
	return resp
}

// waitRoom holds an apply back while the disk is full (persist.Store.Room),
// without the state machine's lock: readers (GET, INFO, snapshots) go on.
// Raft goes on meanwhile; the state machine, and what waits on it, resumes
// once space is freed. False when the cluster closes first.
func (f *fsm) waitRoom(index uint64) bool {
	err := f.room()
	if err == nil {
		return true
	}
	f.log.Warn("the state machine waits for disk space", "index", index, "err", err)
	full := err // the loop below moves err on
	f.full.Store(&full)
	defer f.full.Store(nil)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for ; err != nil; err = f.room() {
		select {
		case <-f.stop:
			return false
		case <-t.C:
		}
	}
	f.log.Info("disk space freed: the state machine goes on", "index", index)
	return true
}

// applyLocked applies an entry to the state in memory and returns the
// batch that stores it (nil for an entry already stored), which the caller
// commits after the lock is released.
func (f *fsm) applyLocked(l *raft.Log, ch *changes) (any, *persist.Batch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Index <= f.meta.Applied {
		return nil, nil // already in the store: a replay after restart
	}
	apply, ok := applyTable[l.Data[0]]
	if !ok {
		panic(fmt.Sprintf("cluster: unknown log entry type %d at index %d", l.Data[0], l.Index))
	}
	batch := f.store.NewBatch()
	defer clear(f.pending)
	resp := apply(f, newDecoder(l.Data[1:], l.Index), batch, ch)
	f.meta.Applied = l.Index
	m, _ := json.Marshal(&f.meta)
	batch.Set(keyState, m)
	return resp, batch
}

// commit stores an entry's batch, without the state machine's lock. The
// state in memory already has the entry (a committed one: readers may see
// it), so a batch the full disk refused is committed again, as it is, once
// space is freed (waitRoom), never applied again; its changes are
// published only once stored. False when the cluster closes first: the
// entry is applied again at the next start.
func (f *fsm) commit(index uint64, batch *persist.Batch) bool {
	err := batch.Commit()
	for errors.Is(err, persist.ErrDiskFull) {
		if !f.waitRoom(index) {
			return false
		}
		err = batch.Commit() // refused before Pebble saw it: the same batch again
	}
	if err != nil {
		panic(fmt.Sprintf("cluster: cannot store the state machine: %v", err))
	}
	return true
}

// publish tells the watchers what an Apply changed, outside the lock:
// readers see new members, and waiters for the index wake.
func (f *fsm) publish(index uint64, ch *changes) {
	if ch.members {
		f.publishMembers()
	}
	f.pubMu.Lock()
	if index > f.published {
		f.published = index
		close(f.pubCh)
		f.pubCh = make(chan struct{})
	}
	f.pubMu.Unlock()
}

func (f *fsm) publishMembers() {
	f.mu.RLock()
	m := make(map[string]member, len(f.meta.Members))
	for id, v := range f.meta.Members {
		m[id] = *v
	}
	f.mu.RUnlock()
	f.members.Store(&m)
}

// waitPublished returns once the changes of index (and all before it) are
// published on this node, or when ctx ends.
func (f *fsm) waitPublished(ctx context.Context, index uint64) error {
	for {
		f.pubMu.Lock()
		done, ch := f.published >= index, f.pubCh
		f.pubMu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var applyTable = map[byte]func(*fsm, *decoder, *persist.Batch, *changes) any{
	entryAlloc:   (*fsm).applyAlloc,
	entryAllocBy: (*fsm).applyAllocBy,
	entrySet:     (*fsm).applySet,
	entryJoin:    (*fsm).applyJoin,
	entryForget:  (*fsm).applyForget,
	entryInit:    (*fsm).applyInit,
	entryLease:   (*fsm).applyLease,
	entryAddrs:   (*fsm).applyAddrs,
	entryRecover: (*fsm).applyRecover,
	entryFresh:   (*fsm).applyFresh,
	entryMaxTags: (*fsm).applyMaxTags,
	entryFloors:  (*fsm).applyFloors,

	entryAllocRuns: (*fsm).applyAllocRuns,

	// Public IDs.
	entryPublicKey: (*fsm).applyPublicKey,
}

func (f *fsm) applyAlloc(d *decoder, b *persist.Batch, _ *changes) any {
	return f.allocate(d, b, false)
}

func (f *fsm) applyAllocBy(d *decoder, b *persist.Batch, _ *changes) any {
	return f.allocate(d, b, true)
}

// allocate applies an entryAlloc, or an entryAllocBy whose items name the
// node and process boot they are for.
func (f *fsm) allocate(d *decoder, b *persist.Batch, by bool) any {
	count := d.uvarint()
	results := make([]allocResult, 0, min(count, 1024))
	for range count {
		tag, n := d.string(), d.varint()
		var node string
		var boot uint64
		if by {
			node, boot = d.string(), d.uvarint()
		}
		results = append(results, f.allocateOne(b, tag, n, node, boot))
	}
	d.end()
	return results
}

// allocateOne allocates n values of tag to node in its process boot (no
// node: to nodes no longer tracked).
func (f *fsm) allocateOne(b *persist.Batch, tag string, n int64, node string, boot uint64) allocResult {
	t, existed := f.tagOrBase(tag)
	if !existed {
		if err := f.tagRoom(1); err != nil {
			return allocResult{Err: err}
		}
	}
	if n < 1 || t.high() > math.MaxInt64-n {
		return allocResult{Err: engine.ErrOverflow}
	}
	first := t.high() + 1
	t.MaxID = t.high() + n
	t.Rev++
	if node == "" {
		t.Bound = t.MaxID
	} else {
		if t.Nodes == nil {
			t.Nodes = map[string]nodeAlloc{}
		}
		na := t.Nodes[node]
		if na.Boot != boot {
			na.Before = max(na.Before, na.Last)
		}
		na.Boot, na.Last = boot, t.MaxID
		t.Nodes[node] = na
	}
	f.putTag(b, tag, t, existed)
	return allocResult{First: first, Last: t.MaxID}
}

// applySet sets a tag to v. An entry with a rev was checked by the leader
// against the tag's state at that rev (every member fenced, no value above
// v issued): it applies only if nothing changed the tag since, and may
// lower it. One without (written before SET could lower) only raises.
func (f *fsm) applySet(d *decoder, b *persist.Batch, _ *changes) any {
	tag, v := d.string(), d.varint()
	cond := setAlways
	if len(d.b) > 0 {
		cond = byte(d.uvarint())
	}
	checked, rev := len(d.b) > 0, uint64(0)
	if checked {
		rev = d.uvarint()
	}
	d.end()
	t, existed := f.tagOrBase(tag)
	res := setResult{Old: t.high(), Existed: existed}
	if (cond == setNX && existed) || (cond == setXX && !existed) {
		return res
	}
	if !existed {
		if res.Err = f.tagRoom(1); res.Err != nil {
			return res
		}
	}
	switch {
	case checked && rev != t.Rev:
		res.Err = errMoved
		return res
	case !checked && v < t.high() && !(existed && v == t.Floor):
		res.Err = fmt.Errorf("%w: %s is at %d", engine.ErrWouldGoBack, tag, t.high())
		return res
	}
	t.Floor = v
	if checked {
		t.MaxID = v
	}
	t.Rev++
	for node, n := range t.Nodes {
		n.Last = min(n.Last, v) // what lay above v was dropped unissued
		t.Nodes[node] = n
	}
	f.putTag(b, tag, t, existed)
	return res
}

func (f *fsm) applyJoin(d *decoder, b *persist.Batch, ch *changes) any {
	node, raftAddr, respAddr := d.string(), d.string(), d.string()
	nowMS, leaseMS := d.varint(), d.varint()
	zone := d.optString()
	var boot uint64
	if len(d.b) > 0 {
		boot = d.uvarint()
	}
	d.end()
	if _, known := f.meta.Members[node]; known {
		return joinResult{Err: fmt.Errorf("%w: node %q is already a member", ErrRefused, node)}
	}
	for gone, end := range f.meta.Departed {
		if end+leaseSkew.Milliseconds() < nowMS {
			delete(f.meta.Departed, gone)
		}
	}
	// The lowest worker ID that no member holds: never used, or forgotten.
	// A reused one starts above its previous holder's last lease, which that
	// holder can no longer extend.
	for w := int64(0); w <= f.maxWorker; w++ {
		ws := f.meta.Workers[w]
		if (ws != nil && !ws.Forgotten) || f.isReserved(w) {
			continue
		}
		res := joinResult{Worker: w}
		if ws != nil {
			res.StartAboveMS = ws.LeaseEnd
		}
		res.LeaseEndMS = max(nowMS, res.StartAboveMS) + leaseMS
		f.meta.Workers[w] = &workerState{Node: node, LeaseEnd: res.LeaseEndMS}
		f.meta.Members[node] = &member{Worker: w, RaftAddr: raftAddr, RESPAddr: respAddr, Zone: zone,
			JoinBoot: boot, StartAboveMS: res.StartAboveMS}
		ch.members = true
		return res
	}
	return joinResult{Err: fmt.Errorf("%w: no free worker ID: all %d are held%s; CLUSTER FORGET a node that is gone", ErrRefused, f.assignable(), f.reservedNote())}
}

func (f *fsm) applyAddrs(d *decoder, b *persist.Batch, ch *changes) any {
	node, raftAddr, respAddr := d.string(), d.string(), d.string()
	hasZone := len(d.b) > 0
	zone := d.optString()
	d.end()
	m, ok := f.meta.Members[node]
	if !ok {
		return fmt.Errorf("%w: node %q is not a member", ErrNotMember, node)
	}
	m.RaftAddr, m.RESPAddr = raftAddr, respAddr
	if hasZone {
		m.Zone = zone
	}
	ch.members = true
	return nil
}

func (f *fsm) applyForget(d *decoder, b *persist.Batch, ch *changes) any {
	node := d.string()
	d.end()
	m, ok := f.meta.Members[node]
	if !ok {
		return fmt.Errorf("%w: unknown node %q", ErrNotMember, node)
	}
	delete(f.meta.Members, node)
	if ws := f.meta.Workers[m.Worker]; ws != nil {
		ws.Forgotten = true
		if ws.Node == node {
			if f.meta.Departed == nil {
				f.meta.Departed = map[string]int64{}
			}
			f.meta.Departed[node] = ws.LeaseEnd
		}
	}
	f.forgetRetired(node, m)
	ch.members = true
	return nil
}

// leaseResult answers entryLease: the committed end, and, for an entry
// that carries the node's incarnation, the incarnation and lease end the
// state held before it (incarnation.go).
type leaseResult struct {
	EndMS           int64
	PrevIncarnation uint64
	PrevEndMS       int64
	Err             error
}

func (f *fsm) applyLease(d *decoder, b *persist.Batch, _ *changes) any {
	node, worker, end := d.string(), d.varint(), d.varint()
	var incarnation uint64
	if len(d.b) > 0 {
		incarnation = d.uvarint()
	}
	d.end()
	m, ok := f.meta.Members[node]
	ws := f.meta.Workers[worker]
	switch {
	case !ok:
		return leaseResult{Err: fmt.Errorf("%w: node %q is not a member of the cluster (forgotten?)", ErrNotMember, node)}
	case m.Worker != worker || ws == nil || ws.Node != node || ws.Forgotten:
		return leaseResult{Err: fmt.Errorf("%w: node %q does not hold worker ID %d", ErrNotMember, node, worker)}
	}
	res := leaseResult{PrevIncarnation: m.Incarnation, PrevEndMS: ws.LeaseEnd}
	ws.LeaseEnd = max(ws.LeaseEnd, end)
	m.Incarnation = max(m.Incarnation, incarnation)
	res.EndMS = ws.LeaseEnd
	return res
}

// applyRecover makes node the only member after the quorum was lost for
// good. The survivor cannot know what a majority it was not part of
// committed last: allocations and lease renewals past its log. So every tag
// skips skipValues (and so does TagBase, for tags it never saw), and every other member's worker ID is forgotten with its
// lease pushed skipMS past the later of its known end and now.
func (f *fsm) applyRecover(d *decoder, b *persist.Batch, ch *changes) any {
	node, nowMS, skipValues, skipMS, cluster := d.string(), d.varint(), d.varint(), d.varint(), d.string()
	d.end()
	f.meta.Cluster = cluster
	// A tag created in entries this node never saw may have reached as far
	// past the old base as a known tag past its high-water.
	f.meta.TagBase += min(skipValues, math.MaxInt64-f.meta.TagBase)
	err := f.store.Scan(keyTagBase, func(k string, v []byte) error {
		t, err := decodeTag(v)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", persist.ErrCorrupt, k, err)
		}
		t.MaxID = t.high() + min(skipValues, math.MaxInt64-t.high())
		t.Bound = t.MaxID // lost entries may have allocated (and issued) up to here
		t.Rev++
		b.Set(k, encodeTag(t, f.meta.TagFormat))
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("cluster: cannot read the state machine: %v", err))
	}
	for id, m := range f.meta.Members {
		if id == node {
			continue
		}
		delete(f.meta.Members, id)
		if ws := f.meta.Workers[m.Worker]; ws != nil {
			ws.Forgotten = true
		}
		f.forgetRetired(id, m)
	}
	for _, ws := range f.meta.Workers {
		if ws.Node != node {
			ws.LeaseEnd = max(ws.LeaseEnd, nowMS) + skipMS
		}
	}
	ch.members = true
	return nil
}

func (f *fsm) applyInit(d *decoder, b *persist.Batch, _ *changes) any {
	id, layout := d.string(), d.string()
	format := tagFormatJSON
	if len(d.b) > 0 {
		format = int(d.uvarint())
	}
	d.end()
	if f.meta.Cluster != "" {
		return nil // the identity is set once
	}
	f.meta.Cluster, f.meta.Layout, f.meta.TagFormat = id, layout, min(format, tagFormatCompact)
	return nil
}

// applyPublicKey stores the cluster's public-ID key once; a later one
// (two leaders proposed one each) changes nothing. It answers the key that
// stays.
func (f *fsm) applyPublicKey(d *decoder, b *persist.Batch, _ *changes) any {
	key := d.string()
	d.end()
	if f.meta.PublicKey == nil && len(key) == engine.PublicKeyLen {
		f.meta.PublicKey = []byte(key)
	}
	return f.meta.PublicKey
}

// publicKey is the public-ID key, nil before entryPublicKey.
func (f *fsm) publicKey() []byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.PublicKey
}

// snapshotState is the whole state, as a snapshot holds it (in memory:
// for a backup's restore and tests; Raft's snapshots are streamed,
// snapshot.go).
type snapshotState struct {
	Meta meta                `json:"meta"`
	Tags map[string]tagState `json:"tags"`
}

// Reads, for GET, EXISTS, DBSIZE and CLUSTER INFO.

func (f *fsm) tag(tag string) (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.stored(tag)
	return t.high(), ok
}

// tagState is a copy of tag's state, for a SET to check.
func (f *fsm) tagState(tag string) (tagState, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.tagOrBase(tag)
	t.Nodes = maps.Clone(t.Nodes)
	return t, ok
}

// tagOrBase is tag's state; a tag this state does not hold starts at
// TagBase, all of which may have been issued (restore.go). The caller
// holds the lock.
func (f *fsm) tagOrBase(tag string) (tagState, bool) {
	t, ok := f.stored(tag)
	if !ok && f.meta.TagBase > 0 {
		t.MaxID, t.Bound = f.meta.TagBase, f.meta.TagBase
	}
	return t, ok
}

func (f *fsm) size() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.TagCount
}

// member reads the published copy: no lock.
func (f *fsm) member(node string) (member, bool) {
	m, ok := (*f.members.Load())[node]
	return m, ok
}

// lease is the committed lease end of node's worker ID, 0 if it holds none.
func (f *fsm) lease(node string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.meta.Members[node]
	if !ok {
		return 0
	}
	if ws := f.meta.Workers[m.Worker]; ws != nil && ws.Node == node && !ws.Forgotten {
		return ws.LeaseEnd
	}
	return 0
}

// departedLeases copies Departed: removed members and their lease ends.
func (f *fsm) departedLeases() map[string]int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.meta.Departed)
}

// freeWorker is the worker ID the next join would get, -1 when none is free.
func (f *fsm) freeWorker() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for w := int64(0); w <= f.maxWorker; w++ {
		if ws := f.meta.Workers[w]; (ws == nil || ws.Forgotten) && !f.isReserved(w) {
			return w
		}
	}
	return -1
}

// freeWorkers counts the worker IDs no member holds, reserved ones left out.
func (f *fsm) freeWorkers() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	free := int64(0)
	for w := int64(0); w <= f.maxWorker; w++ {
		if ws := f.meta.Workers[w]; (ws == nil || ws.Forgotten) && !f.isReserved(w) {
			free++
		}
	}
	return free
}

// identity is the cluster ID and layout from entryInit, "" before it.
func (f *fsm) identity() (cluster, layout string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.Cluster, f.meta.Layout
}

func (f *fsm) applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.Applied
}

// memberList is the members, sorted by node ID.
func (f *fsm) memberList() []MemberStatus {
	var out []MemberStatus
	for id, m := range *f.members.Load() {
		out = append(out, MemberStatus{NodeID: id, Worker: m.Worker, RaftAddr: m.RaftAddr, RESPAddr: m.RESPAddr, Zone: m.Zone})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Entry encoding.

type encoder []byte

func newEntry(kind byte) encoder { return encoder{kind} }

func (e encoder) string(s string) encoder {
	return append(binary.AppendUvarint(e, uint64(len(s))), s...)
}

func (e encoder) varint(v int64) encoder   { return binary.AppendVarint(e, v) }
func (e encoder) uvarint(v uint64) encoder { return binary.AppendUvarint(e, v) }

// decoder reads an entry; a malformed one panics, since the replicas'
// states would otherwise diverge.
type decoder struct {
	b     []byte
	index uint64
}

func newDecoder(b []byte, index uint64) *decoder { return &decoder{b: b, index: index} }

func (d *decoder) fail(what string) {
	panic(fmt.Sprintf("cluster: malformed log entry at index %d: %s", d.index, what))
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string past the end")
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// optString reads a string added to an entry type after entries of it
// were written: "" at the end of an older entry.
func (d *decoder) optString() string {
	if len(d.b) == 0 {
		return ""
	}
	return d.string()
}

func (d *decoder) end() {
	if len(d.b) != 0 {
		d.fail("trailing bytes")
	}
}
