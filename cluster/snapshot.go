package cluster

// Raft snapshots of the state machine, streamed both ways. A snapshot is
// written from a Pebble snapshot, without the state machine's lock. A
// cluster whose meta says tagFormatCompact (one created by a build that
// reads it) writes the compact shape of writeCompactState: the meta, then
// each tag's name and compact record in key order. Any other writes the
// JSON shape of snapshotJSON (tagjson.go), which every build reads: the
// meta, then "tags" in key order, then "tag_bytes" for names that are not
// UTF-8. A restore reads either, told apart by the first bytes, a tag at a
// time, and writes it in batches of at most restoreBatchBytes: the first
// batch removes the state machine's keys (meta included), the last writes
// the meta, synced. A restore cut between them leaves a store with no
// meta, whose applied index is 0: Raft's snapshot is above it, and the
// next start restores it again (restoreOnStart).

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/raft"

	"idserver/persist"
)

// restoreBatchBytes bounds the writes of one batch of a restore (a batch
// of one tag larger than it excepted).
var restoreBatchBytes = 4 << 20

// restoreCommitted, when set, is called after each batch of a restore but
// the last is committed, with the batch's number from 1; an error stops the
// restore there (tests cut restores with it).
var restoreCommitted func(batch int) error

// Snapshot implements raft.FSM: a Pebble snapshot taken now, written out
// later. The lock is held only to take it, so that it never sees a
// restore half done.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{snap: f.store.Snapshot()}, nil
}

// fsmSnapshot is a state to write: a Pebble snapshot, read only by Persist.
type fsmSnapshot struct {
	snap *persist.Snapshot
}

// Persist writes the snapshot to sink, in its cluster's shape (compact or
// JSON: writeSnapshot), and then releases the
// Pebble snapshot: hashicorp/raft's RecoverCluster persists a snapshot and
// never calls Release, and Pebble refuses to close with one open.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	defer s.Release()
	w := bufio.NewWriterSize(sink, 256<<10)
	err := writeSnapshot(w, s.snap)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release closes the Pebble snapshot; it may be called again.
func (s *fsmSnapshot) Release() {
	if s.snap != nil {
		s.snap.Close()
		s.snap = nil
	}
}

// stateJSON is the whole state as a snapshot holds it, in one buffer (a
// backup's image).
func (f *fsm) stateJSON() ([]byte, error) {
	snap, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Release()
	var buf bytes.Buffer
	err = writeState(&buf, snap.(*fsmSnapshot).snap)
	return buf.Bytes(), err
}

// snapMeta is the meta in snap, and its JSON.
func snapMeta(snap *persist.Snapshot) (meta, []byte, error) {
	m := meta{Members: map[string]*member{}, Workers: map[int64]*workerState{}}
	if v, ok, err := snap.Get(keyState); err != nil {
		return m, nil, err
	} else if ok {
		if err := json.Unmarshal(v, &m); err != nil {
			return m, nil, fmt.Errorf("%w: %s: %v", persist.ErrCorrupt, keyState, err)
		}
	}
	mb, err := json.Marshal(&m)
	return m, mb, err
}

// writeSnapshot writes the state in snap as a Raft snapshot: compact when
// its meta says the cluster writes the compact format, which only builds
// that read it join; snapshotJSON otherwise, which every build reads.
func writeSnapshot(w io.Writer, snap *persist.Snapshot) error {
	m, mb, err := snapMeta(snap)
	if err != nil {
		return err
	}
	if m.TagFormat >= tagFormatCompact {
		return writeCompactState(w, snap, mb)
	}
	return writeState(w, snap)
}

// compactMagic opens a compact snapshot: its first byte cannot open JSON.
const compactMagic = "\x00idsnap\x01"

// writeCompactState writes the state in snap, whose meta's JSON is mb, as
// a compact snapshot:
//
//	compactMagic, uvarint len, the meta's JSON,
//	per tag in key order: uvarint len(name)+1, name, uvarint len, record,
//	0, uvarint the number of tags
//
// where each record is a compact tag record (tagrecord.go) whose nodes
// and boots are numbered (nodeRefs).
func writeCompactState(w io.Writer, snap *persist.Snapshot, mb []byte) error {
	ew := errWriter{w: w}
	ew.write([]byte(compactMagic))
	ew.write(binary.AppendUvarint(nil, uint64(len(mb))))
	ew.write(mb)
	var buf, v []byte
	var refs nodeRefs
	count := uint64(0)
	err := snap.Scan(keyTagBase, func(k string, stored []byte) error {
		name := k[len(keyTagBase):]
		t, err := decodeTag(stored)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", persist.ErrCorrupt, k, err)
		}
		v = appendTag(v[:0], t, &refs)
		buf = binary.AppendUvarint(buf[:0], uint64(len(name))+1)
		buf = append(buf, name...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
		ew.write(buf)
		count++
		return ew.err
	})
	if err != nil {
		return err
	}
	ew.write(binary.AppendUvarint([]byte{0}, count))
	return ew.err
}

// writeState writes the state in snap as snapshotJSON.
func writeState(w io.Writer, snap *persist.Snapshot) error {
	_, mb, err := snapMeta(snap)
	if err != nil {
		return err
	}
	ew := errWriter{w: w}
	ew.write([]byte(`{"meta":`))
	ew.write(mb)
	ew.write([]byte(`,"tags":{`))
	// One pass over the tags: a name that is UTF-8 is written at once as
	// a member of "tags"; one that is not (few, if any) goes to "tag_bytes",
	// keyed by its base64, which follows.
	var othersBuf bytes.Buffer
	others := errWriter{w: &othersBuf}
	var nUTF, nOthers int
	err = snap.Scan(keyTagBase, func(k string, v []byte) error {
		name, out, n := k[len(keyTagBase):], &ew, &nUTF
		if !utf8.ValidString(name) {
			name, out, n = base64.StdEncoding.EncodeToString([]byte(name)), &others, &nOthers
		}
		if *n > 0 {
			out.write([]byte{','})
		}
		*n++
		key, _ := json.Marshal(name)
		out.write(key)
		out.write([]byte{':'})
		if len(v) > 0 && v[0] == tagJSON {
			out.write(v[1:]) // the tag's JSON as encodeTag wrote it
		} else {
			t, err := decodeTag(v)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", persist.ErrCorrupt, k, err)
			}
			b, _ := json.Marshal(t)
			out.write(b)
		}
		return ew.err
	})
	if err != nil {
		return err
	}
	ew.write([]byte{'}'})
	if nOthers > 0 {
		ew.write([]byte(`,"tag_bytes":{`))
		ew.write(othersBuf.Bytes())
		ew.write([]byte{'}'})
	}
	ew.write([]byte{'}'})
	return ew.err
}

// errWriter keeps the first error of its writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// Restore implements raft.FSM: the store's state machine keys are replaced
// by the snapshot's, read and written in bounded batches. The lock is held
// throughout: no reader sees a state half restored.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.restoreMu.Lock()
	defer f.restoreMu.Unlock()
	began := time.Now()
	f.log.Info("restoring a snapshot: the state machine waits until it is in")
	f.mu.Lock()
	m, started, err := f.restoreStream(bufio.NewReaderSize(rc, 256<<10))
	switch {
	case err == nil:
		f.meta = m
	case started:
		// The store holds part of the snapshot and no meta: so does the
		// state in memory, which a rerun of the restore replaces.
		f.reset()
		f.meta.TagCount, _ = f.store.Count(keyTagBase)
	}
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("restore of a snapshot: %w", err)
	}
	f.log.Info("snapshot restored", "applied_index", m.Applied, "tags", m.TagCount, "took", time.Since(began).Round(time.Millisecond))
	f.publish(m.Applied, &changes{members: true})
	return nil
}

// restoreStream writes the snapshot r holds into the store; started says
// whether it changed the store.
func (f *fsm) restoreStream(r *bufio.Reader) (_ meta, started bool, _ error) {
	w := &restoreWriter{f: f, b: f.store.NewBatch()}
	w.b.DeletePrefix(fsmPrefix)
	var m meta
	var err error
	if head, _ := r.Peek(len(compactMagic)); string(head) == compactMagic {
		m, err = readCompactState(r, w)
	} else {
		m, err = readJSONState(r, w)
	}
	if err != nil {
		return m, w.started, err
	}
	if m.Members == nil {
		m.Members = map[string]*member{}
	}
	if m.Workers == nil {
		m.Workers = map[int64]*workerState{}
	}
	m.TagCount = w.count
	mb, _ := json.Marshal(&m)
	w.b.Set(keyState, mb)
	if err := w.b.CommitSync(); err != nil {
		return m, w.started, err
	}
	return m, true, nil
}

// restoreWriter writes a restore's tags in batches of at most
// restoreBatchBytes; the first batch also removes the state machine's keys.
type restoreWriter struct {
	f       *fsm
	b       *persist.Batch
	started bool // a batch was committed
	batches int
	count   int // tags written
	inBatch int
}

func (w *restoreWriter) put(name string, v []byte) error {
	key := keyTagBase + name
	w.count++
	if w.inBatch == 0 || w.b.Len()+len(key)+len(v) <= restoreBatchBytes {
		w.b.Set(key, v)
		w.inBatch++
		return nil
	}
	if err := w.b.Commit(); err != nil {
		return err
	}
	w.started = true
	w.batches++
	w.b, w.inBatch = w.f.store.NewBatch(), 1
	w.b.Set(key, v)
	if restoreCommitted != nil {
		return restoreCommitted(w.batches)
	}
	return nil
}

// readJSONState reads a snapshotJSON into w; its tags are written in the
// format of its meta when the meta comes first (as writeState writes it),
// JSON otherwise.
func readJSONState(r io.Reader, w *restoreWriter) (meta, error) {
	m := meta{}
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return m, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return m, err
		}
		switch tok {
		case "meta":
			if err := dec.Decode(&m); err != nil {
				return m, fmt.Errorf("meta: %w", err)
			}
		case "tags", "tag_bytes":
			if err := readTags(dec, tok == "tag_bytes", func(name string, t tagState) error {
				return w.put(name, encodeTag(t, m.TagFormat))
			}); err != nil {
				return m, fmt.Errorf("%s: %w", tok, err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return m, err
			}
		}
	}
	return m, expectDelim(dec, '}')
}

// readCompactState reads what writeCompactState writes into w.
func readCompactState(r *bufio.Reader, w *restoreWriter) (meta, error) {
	m := meta{}
	if _, err := r.Discard(len(compactMagic)); err != nil {
		return m, err
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return m, fmt.Errorf("meta: %w", err)
	}
	mb, err := readN(r, n)
	if err != nil {
		return m, fmt.Errorf("meta: %w", err)
	}
	if err := json.Unmarshal(mb, &m); err != nil {
		return m, fmt.Errorf("meta: %w", err)
	}
	count := uint64(0)
	var refs nodeRefs
	for {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return m, fmt.Errorf("tag %d: %w", count+1, noEOF(err))
		}
		if n == 0 {
			break
		}
		name, err := readN(r, n-1)
		if err != nil {
			return m, fmt.Errorf("tag %d: %w", count+1, err)
		}
		n, err = binary.ReadUvarint(r)
		if err != nil {
			return m, fmt.Errorf("tag %q: %w", name, noEOF(err))
		}
		v, err := readN(r, n)
		if err != nil {
			return m, fmt.Errorf("tag %q: %w", name, err)
		}
		if len(v) == 0 || v[0] != tagCompact {
			return m, fmt.Errorf("tag %q: not a compact record", name)
		}
		t, err := decodeCompactTag(v[1:], &refs)
		if err != nil {
			return m, fmt.Errorf("tag %q: %w", name, err)
		}
		if err := w.put(string(name), encodeTag(t, m.TagFormat)); err != nil {
			return m, err
		}
		count++
	}
	want, err := binary.ReadUvarint(r)
	if err != nil {
		return m, fmt.Errorf("the number of tags: %w", noEOF(err))
	}
	if want != count {
		return m, fmt.Errorf("%d tags where the snapshot says %d", count, want)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return m, fmt.Errorf("bytes after the end of the snapshot")
	}
	return m, nil
}

// readN reads n bytes, refusing more than the reader could hold.
func readN(r *bufio.Reader, n uint64) ([]byte, error) {
	if n > 1<<30 {
		return nil, fmt.Errorf("a length of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, noEOF(err)
}

// noEOF is err, a cut short stream said as such.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readTags reads an object of tags (null for none), calling fn for each;
// with bytes, the keys are the base64 of the names.
func readTags(dec *json.Decoder, bytes bool, fn func(string, tagState) error) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("want an object, have %v", tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		if bytes {
			b, err := base64.StdEncoding.DecodeString(name)
			if err != nil {
				return fmt.Errorf("key %q: %v", name, err)
			}
			name = string(b)
		}
		var t tagState
		if err := dec.Decode(&t); err != nil {
			return fmt.Errorf("tag %q: %w", name, err)
		}
		if err := fn(name, t); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, have %v", want, tok)
	}
	return nil
}

// restoreOnStart brings the state machine up to Raft's newest snapshot
// when the store has applied less (a restore cut short, a store that lags
// Raft's log): Raft restores no snapshot at start
// (NoSnapshotRestoreOnStart) and replays its log from the newest
// snapshot's index on. The entries between are applied from the log when
// it holds them all; otherwise the snapshot is restored.
func restoreOnStart(f *fsm, snaps raft.SnapshotStore, logs raft.LogStore) error {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return err
	}
	snap := list[0]
	if snap.Index <= f.applied() {
		return nil
	}
	if replayed(f, logs, snap.Index, snap.Term) {
		return nil
	}
	_, rc, err := snaps.Open(snap.ID)
	if err != nil {
		return fmt.Errorf("%w: raft snapshot %s (index %d, above the %d the state machine applied): %v",
			persist.ErrDamaged, snap.ID, snap.Index, f.applied(), err)
	}
	if err := f.Restore(rc); err != nil {
		return err
	}
	// The snapshot holds every entry up to its index; those after the
	// last command (elections' no-ops, configurations) change nothing.
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.meta.Applied >= snap.Index {
		return nil
	}
	f.meta.Applied = snap.Index
	m, _ := json.Marshal(&f.meta)
	return f.store.SetSync(keyState, m)
}

// replayed applies the entries of logs after what f applied, up to to (a
// snapshot's index, of term term), and says whether it did: only when the
// log holds them all, its entry at to has the snapshot's term (else the
// entries below it may be of another leader's branch that the snapshot's
// replaced), and each reads as an entry this build applies (checkEntry)
// and decodes. The start checks only the entries after the newest
// snapshot (dircheck.go), and these lie at or below it: one that does not
// read is left to the snapshot, which holds it, rather than stopping the
// process as Apply does on it. When it answers false the caller restores
// the snapshot, which replaces whatever the replay applied.
func replayed(f *fsm, logs raft.LogStore, to, term uint64) bool {
	var end raft.Log
	if err := logs.GetLog(to, &end); err != nil || end.Term != term {
		return false
	}
	for i := f.applied() + 1; i <= to; i++ {
		var l raft.Log
		err := logs.GetLog(i, &l)
		if errors.Is(err, raft.ErrLogNotFound) {
			return false // compacted away: the snapshot holds it
		}
		if err == nil {
			err = checkEntry(i, &l)
		}
		if err != nil {
			f.log.Warn("restoring the Raft snapshot instead of replaying the log below it", "entry", i, "err", err)
			return false
		}
		if !replayOne(f, &l) {
			return false
		}
	}
	return true
}

// replayOne applies l, and answers false, with a warning, when its body
// does not decode (Apply panics on it: decoder.fail).
func replayOne(f *fsm, l *raft.Log) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			f.log.Warn("restoring the Raft snapshot instead of replaying the log below it", "entry", l.Index, "err", p)
			ok = false
		}
	}()
	f.Apply(l)
	return true
}
