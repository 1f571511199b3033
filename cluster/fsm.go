package cluster

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"

	"github.com/hashicorp/raft"

	"idserver/engine"
	"idserver/persist"
)

// Log entry types: one type byte, then the payload.
const (
	entryAlloc     byte = 1 // group of (tag, n): allocate n values of each
	entrySet       byte = 2 // tag, v[, cond]: raise the tag's floor to v (cond: setNX, setXX; absent in old entries)
	entryJoin      byte = 3 // node ID, raft address, RESP address[, fresh]: a member, with a worker ID
	entryForget    byte = 4 // node ID: gone for good, its worker ID free for reuse
	entryHighWater byte = 5 // node ID, ms: the node's replicated snowflake high-water
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
type tagState struct {
	MaxID int64 `json:"max_id"`
	Floor int64 `json:"floor"`
}

func (t tagState) high() int64 { return max(t.MaxID, t.Floor) }

// member is a node of the cluster.
type member struct {
	Worker   int64  `json:"worker"`
	RaftAddr string `json:"raft_addr"`
	RESPAddr string `json:"resp_addr"`
}

// workerState is one worker ID: who holds it, and the last high-water its
// holder replicated. A forgotten holder's ID can be reused above HighWater.
type workerState struct {
	Node      string `json:"node"`
	HighWater int64  `json:"high_water"`
	Forgotten bool   `json:"forgotten"`
}

// meta is the small part of the state, kept under one key.
type meta struct {
	Applied uint64                 `json:"applied"`
	Members map[string]*member     `json:"members"`
	Workers map[int64]*workerState `json:"workers"`
}

// allocItem is one request in an entryAlloc, and allocResult its answer.
type allocItem struct {
	Tag string
	N   int64
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
	StartAboveMS int64 // the forgotten previous holder's high-water
	Err          error
}

// fsm is the Raft state machine: tags, members, worker IDs, in Pebble with
// an in-memory copy for reads. Apply is deterministic: no clock, no
// randomness, no I/O beyond the state store.
type fsm struct {
	store     *persist.Store
	maxWorker int64
	onFloor   func(tag string, v int64)

	mu   sync.RWMutex
	meta meta
	tags map[string]tagState
}

func newFSM(store *persist.Store, maxWorker int64, onFloor func(string, int64)) (*fsm, error) {
	f := &fsm{store: store, maxWorker: maxWorker, onFloor: onFloor}
	f.reset()
	if v, ok, err := store.Get(keyState); err != nil {
		return nil, err
	} else if ok {
		if err := json.Unmarshal(v, &f.meta); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", persist.ErrCorrupt, keyState, err)
		}
	}
	err := store.Scan(keyTagBase, func(k string, v []byte) error {
		if len(v) != 16 {
			return fmt.Errorf("%w: %s", persist.ErrCorrupt, k)
		}
		f.tags[k[len(keyTagBase):]] = tagState{int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))}
		return nil
	})
	return f, err
}

func (f *fsm) reset() {
	f.meta = meta{Members: map[string]*member{}, Workers: map[int64]*workerState{}}
	f.tags = map[string]tagState{}
}

func encodeTag(t tagState) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(t.MaxID))
	return binary.BigEndian.AppendUint64(b, uint64(t.Floor))
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if len(l.Data) == 0 {
		panic(fmt.Sprintf("cluster: empty log entry at index %d", l.Index))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Index <= f.meta.Applied {
		return nil // already in the store: a replay after restart
	}
	apply, ok := applyTable[l.Data[0]]
	if !ok {
		panic(fmt.Sprintf("cluster: unknown log entry type %d at index %d", l.Data[0], l.Index))
	}
	batch := f.store.NewBatch()
	resp := apply(f, newDecoder(l.Data[1:], l.Index), batch)
	f.meta.Applied = l.Index
	m, _ := json.Marshal(&f.meta)
	batch.Set(keyState, m)
	if err := batch.Commit(); err != nil {
		panic(fmt.Sprintf("cluster: cannot store the state machine: %v", err))
	}
	return resp
}

var applyTable = map[byte]func(*fsm, *decoder, *persist.Batch) any{
	entryAlloc:     (*fsm).applyAlloc,
	entrySet:       (*fsm).applySet,
	entryJoin:      (*fsm).applyJoin,
	entryForget:    (*fsm).applyForget,
	entryHighWater: (*fsm).applyHighWater,
}

func (f *fsm) applyAlloc(d *decoder, b *persist.Batch) any {
	count := d.uvarint()
	results := make([]allocResult, 0, min(count, 1024))
	for range count {
		tag, n := d.string(), d.varint()
		t := f.tags[tag]
		if n < 1 || t.high() > math.MaxInt64-n {
			results = append(results, allocResult{Err: engine.ErrOverflow})
			continue
		}
		first := t.high() + 1
		t.MaxID = t.high() + n
		f.tags[tag] = t
		b.Set(keyTagBase+tag, encodeTag(t))
		results = append(results, allocResult{First: first, Last: t.MaxID})
	}
	d.end()
	return results
}

func (f *fsm) applySet(d *decoder, b *persist.Batch) any {
	tag, v := d.string(), d.varint()
	cond := setAlways
	if len(d.b) > 0 {
		cond = byte(d.uvarint())
	}
	d.end()
	t, existed := f.tags[tag]
	res := setResult{Old: t.high(), Existed: existed}
	if (cond == setNX && existed) || (cond == setXX && !existed) {
		return res
	}
	if v < t.high() {
		res.Err = fmt.Errorf("%w: %s is at %d", engine.ErrWouldGoBack, tag, t.high())
		return res
	}
	t.Floor = v
	f.tags[tag] = t
	b.Set(keyTagBase+tag, encodeTag(t))
	if f.onFloor != nil {
		f.onFloor(tag, v)
	}
	return res
}

func (f *fsm) applyJoin(d *decoder, b *persist.Batch) any {
	node, raftAddr, respAddr := d.string(), d.string(), d.string()
	fresh := len(d.b) > 0 && d.uvarint() == 1
	d.end()
	m, known := f.meta.Members[node]
	if known && !fresh {
		m.RaftAddr, m.RESPAddr = raftAddr, respAddr
		return joinResult{Worker: m.Worker}
	}
	// The lowest worker ID that no member holds: never used, or forgotten.
	// A known node with a wiped directory gets a new one; its old one stays
	// retired, since what it issued under it is lost with the directory.
	for w := int64(0); w <= f.maxWorker; w++ {
		ws := f.meta.Workers[w]
		if ws != nil && !ws.Forgotten {
			continue
		}
		res := joinResult{Worker: w}
		if ws != nil {
			res.StartAboveMS = ws.HighWater
		}
		f.meta.Workers[w] = &workerState{Node: node, HighWater: res.StartAboveMS}
		f.meta.Members[node] = &member{Worker: w, RaftAddr: raftAddr, RESPAddr: respAddr}
		return res
	}
	return joinResult{Err: fmt.Errorf("no free worker ID: all %d are held; CLUSTER FORGET a node that is gone", f.maxWorker+1)}
}

func (f *fsm) applyForget(d *decoder, b *persist.Batch) any {
	node := d.string()
	d.end()
	m, ok := f.meta.Members[node]
	if !ok {
		return fmt.Errorf("unknown node %q", node)
	}
	delete(f.meta.Members, node)
	if ws := f.meta.Workers[m.Worker]; ws != nil {
		ws.Forgotten = true
	}
	return nil
}

func (f *fsm) applyHighWater(d *decoder, b *persist.Batch) any {
	node, ms := d.string(), d.varint()
	d.end()
	if m, ok := f.meta.Members[node]; ok {
		if ws := f.meta.Workers[m.Worker]; ws != nil && ws.Node == node && ms > ws.HighWater {
			ws.HighWater = ms
		}
	}
	return nil
}

// snapshotState is the whole state, as a snapshot holds it.
type snapshotState struct {
	Meta meta                `json:"meta"`
	Tags map[string]tagState `json:"tags"`
}

// Snapshot implements raft.FSM: a copy taken now, written out later.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	data, err := json.Marshal(snapshotState{Meta: f.meta, Tags: f.tags})
	if err != nil {
		return nil, err
	}
	return fsmSnapshot(data), nil
}

// Restore implements raft.FSM: the store's state machine keys are replaced.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var s snapshotState
	if err := json.NewDecoder(rc).Decode(&s); err != nil {
		return err
	}
	if s.Meta.Members == nil {
		s.Meta.Members = map[string]*member{}
	}
	if s.Meta.Workers == nil {
		s.Meta.Workers = map[int64]*workerState{}
	}
	if s.Tags == nil {
		s.Tags = map[string]tagState{}
	}
	b := f.store.NewBatch()
	b.DeletePrefix(fsmPrefix)
	for tag, t := range s.Tags {
		b.Set(keyTagBase+tag, encodeTag(t))
	}
	m, _ := json.Marshal(&s.Meta)
	b.Set(keyState, m)
	if err := b.CommitSync(); err != nil {
		return err
	}
	f.mu.Lock()
	f.meta, f.tags = s.Meta, s.Tags
	f.mu.Unlock()
	if f.onFloor != nil {
		for tag, t := range s.Tags {
			f.onFloor(tag, t.Floor)
		}
	}
	return nil
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() {}

// Reads, for GET, EXISTS, DBSIZE and CLUSTER INFO.

func (f *fsm) tag(tag string) (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.tags[tag]
	return t.high(), ok
}

func (f *fsm) size() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.tags)
}

func (f *fsm) member(node string) (member, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.meta.Members[node]
	if !ok {
		return member{}, false
	}
	return *m, true
}

func (f *fsm) applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.Applied
}

// memberList is "node=worker@resp" for each member, sorted.
func (f *fsm) memberList() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for id, m := range f.meta.Members {
		out = append(out, id+"="+strconv.FormatInt(m.Worker, 10)+"@"+m.RESPAddr)
	}
	sort.Strings(out)
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

func (d *decoder) end() {
	if len(d.b) != 0 {
		d.fail("trailing bytes")
	}
}
