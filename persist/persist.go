// Package persist keeps what must survive a crash in Pebble: the node
// identity, the ID layout, the snowflake high-water mark, and the state
// machine's keys (cluster package), which it reads, scans and snapshots.
//
// Durability is in the method names: Set may be lost by a crash (of the
// process, not only the machine), SetSync is on disk when it returns.
// Anything that lets an ID out before it is replicated uses SetSync.
package persist

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// Errors returned by the store.
var (
	// ErrLocked: another process holds the data directory.
	ErrLocked = errors.New("data directory is in use by another process")
	// ErrLayoutMismatch: the data directory was made with another ID layout.
	ErrLayoutMismatch = errors.New("ID layout differs from the stored one")
	// ErrCorrupt: a stored value cannot be read back.
	ErrCorrupt = errors.New("stored value is corrupt")
	// ErrDiskFull: the data directory's file system has less free space
	// than the store keeps in reserve; the write was refused before Pebble
	// saw it, and nothing was written.
	ErrDiskFull = errors.New("disk full")
)

// Keys of the values kept here.
const (
	keyNodeID    = "node/id"
	keyLayout    = "node/layout"
	keyHighWater = "snowflake/high-water"
	// keyHighWaterWall: the mark and the wall clock it was written at, 8
	// bytes each, written in the same sync as keyHighWater. It belongs to
	// the mark only while its first 8 bytes equal keyHighWater's: a build
	// that writes the mark alone leaves it stale, and it is then ignored.
	keyHighWaterWall = "snowflake/high-water-wall"
	keyWorker        = "node/worker"
	keyCluster       = "node/cluster"
)

// Store is a locked data directory with a Pebble database in <dir>/pebble.
type Store struct {
	dir     string
	lock    *os.File
	db      *pebble.DB
	reserve uint64 // free bytes below which writes are refused (Room)
	syncs   atomic.Pointer[SyncTimer]
}

// SyncTimer is told of every synced write (SetSync, CommitSync): it is
// called as the write starts, and the function it returns once the write
// is durable or failed.
type SyncTimer func() (done func())

// TimeSyncs has every later synced write timed by t.
func (s *Store) TimeSyncs(t SyncTimer) { s.syncs.Store(&t) }

// timeSync starts timing one synced write and returns what ends it.
func (s *Store) timeSync() (done func()) {
	if t := s.syncs.Load(); t != nil {
		return (*t)()
	}
	return func() {}
}

// maxReserve is the most free space a store keeps back: a tenth of its
// file system, at most this. Pebble needs some of it to flush and compact.
const maxReserve = 64 << 20

// Open creates dir if needed, takes its lock (one process per directory)
// and opens the Pebble database inside it.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := Lock(dir)
	if err != nil {
		return nil, err
	}
	if err := checkPebbleFiles(dir); err != nil {
		lock.Close()
		return nil, err
	}
	// Opening replays Pebble's log into tables: on a full disk each
	// table write fails and Pebble retries it at once, for ever (pebble
	// v2.1.7: an ERROR line and a 0-byte .sst per try, a core spinning,
	// Open never returning). Refuse instead, before any file is written.
	reserve := reserveFor(dir)
	if free, ok := freeBytes(dir); ok && free < reserve {
		lock.Close()
		return nil, fmt.Errorf("%w: %d MiB free on the file system of %s, below the %d MiB kept in reserve: free some space and start again (nothing was changed)",
			ErrDiskFull, free>>20, dir, reserve>>20)
	}
	// Tags are read one key at a time, and a new tag is a key that is not
	// there: Bloom filters answer that without reading the tables' blocks;
	// the block cache is 32 MiB (Pebble's default is 8), for the index
	// blocks of many tags.
	cache := pebble.NewCache(32 << 20)
	defer cache.Unref()
	opts := &pebble.Options{Logger: quietLogger{}, Cache: cache}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(filepath.Join(dir, "pebble"), opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("open pebble in %s: %w", dir, err)
	}
	return &Store{dir: dir, lock: lock, db: db, reserve: reserve}, nil
}

// Lock takes dir's lock (one process per directory), held until the file
// it returns is closed.
func Lock(dir string) (*os.File, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return lock, nil
}

// Space is the free space on the store's file system and the reserve below
// which Room refuses writes, in bytes; ok is false where the file system
// cannot tell.
func (s *Store) Space() (free, reserve uint64, ok bool) {
	free, ok = freeBytes(s.dir)
	return free, s.reserve, ok
}

// Room says whether the file system has room for a write: ErrDiskFull when
// less than the reserve is free. Pebble panics when a write to its log
// fails (pebble v2.1.7, DB.commitWrite), so every write checks first and
// a disk that fills makes writes fail, with nothing written, well before
// the log cannot be written; the process goes on, and writes succeed again
// once space is freed. Every write of the store calls it; it costs one
// statfs, and writes are few (windows, the state machine's applies).
func (s *Store) Room() error {
	free, ok := freeBytes(s.dir)
	if !ok || free >= s.reserve {
		return nil // a file system that cannot tell: the write tries
	}
	return fmt.Errorf("%w: %d MiB free on the file system of %s, below the %d MiB kept in reserve; free some space",
		ErrDiskFull, free>>20, s.dir, s.reserve>>20)
}

// Usage is what the store holds, in bytes: on disk (its tables and its
// log) and in memory (the block cache's blocks and the memtables, which
// Pebble allocates outside the Go heap in a cgo build and with make
// without cgo).
type Usage struct {
	Disk      uint64
	Cache     uint64
	MemTables uint64
}

// Memory is the store's memory: its cache and memtables.
func (u Usage) Memory() uint64 { return u.Cache + u.MemTables }

// Usage reads the store's figures from Pebble's metrics (a few
// microseconds, nothing read from disk).
func (s *Store) Usage() Usage {
	m := s.db.Metrics()
	return Usage{Disk: m.DiskSpaceUsage(), Cache: uint64(m.BlockCache.Size), MemTables: m.MemTable.Size + m.MemTable.ZombieSize}
}

// Dir is the data directory.
func (s *Store) Dir() string { return s.dir }

// Close closes the database and releases the directory lock.
func (s *Store) Close() error {
	err := s.db.Close()
	s.lock.Close()
	return err
}

// Get returns the value of key, with ok false when there is none.
func (s *Store) Get(key string) (value []byte, ok bool, err error) { return get(s.db, key) }

// get reads key from r (the store or a snapshot of it), a copy of its
// value, with ok false when there is none.
func get(r pebble.Reader, key string) (value []byte, ok bool, err error) {
	v, closer, err := r.Get([]byte(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// Set writes key without waiting for the disk: a crash may lose it.
func (s *Store) Set(key string, value []byte) error {
	if err := s.Room(); err != nil {
		return err
	}
	return s.db.Set([]byte(key), value, pebble.NoSync)
}

// SetSync writes key and returns once it is durable (fsync of the WAL).
func (s *Store) SetSync(key string, value []byte) error {
	if err := s.Room(); err != nil {
		return err
	}
	defer s.timeSync()()
	return s.db.Set([]byte(key), value, pebble.Sync)
}

// HighWater returns the snowflake high-water in ms since the epoch, 0 if none.
func (s *Store) HighWater() (int64, error) {
	v, ok, err := s.Get(keyHighWater)
	if err != nil || !ok {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: %s has %d bytes", ErrCorrupt, keyHighWater, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// SetHighWaterSync stores the snowflake high-water durably, without the
// wall clock it was written at (HighWaterWall then reports none).
func (s *Store) SetHighWaterSync(ms int64) error {
	return s.SetSync(keyHighWater, binary.BigEndian.AppendUint64(nil, uint64(ms)))
}

// SetHighWaterWallSync stores the snowflake high-water and the wall clock
// (ms since the epoch) it was written at, both in one durable write.
func (s *Store) SetHighWaterWallSync(ms, wallMS int64) error {
	b := s.NewBatch()
	defer b.b.Close()
	mark := binary.BigEndian.AppendUint64(nil, uint64(ms))
	b.Set(keyHighWater, mark)
	b.Set(keyHighWaterWall, binary.BigEndian.AppendUint64(mark, uint64(wallMS)))
	return b.CommitSync()
}

// HighWaterWall returns the wall clock (ms since the epoch) the stored
// high-water was written at, with ok false when it is not known: no mark,
// or one written without it (SetHighWaterSync, or a build that predates
// the key).
func (s *Store) HighWaterWall() (wallMS int64, ok bool, err error) {
	hw, err := s.HighWater()
	if err != nil {
		return 0, false, err
	}
	v, ok, err := s.Get(keyHighWaterWall)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 16 {
		return 0, false, fmt.Errorf("%w: %s has %d bytes", ErrCorrupt, keyHighWaterWall, len(v))
	}
	if int64(binary.BigEndian.Uint64(v)) != hw {
		return 0, false, nil
	}
	return int64(binary.BigEndian.Uint64(v[8:])), true, nil
}

// Worker returns the worker ID the cluster gave this node, and the
// high-water its previous holder left, with ok false when none was given.
func (s *Store) Worker() (worker, startAboveMS int64, ok bool, err error) {
	v, ok, err := s.Get(keyWorker)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	if len(v) != 16 {
		return 0, 0, false, fmt.Errorf("%w: %s has %d bytes", ErrCorrupt, keyWorker, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:])), true, nil
}

// SetWorkerSync keeps the worker ID durably, so that a restart issues IDs
// without asking a quorum.
func (s *Store) SetWorkerSync(worker, startAboveMS int64) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(worker))
	return s.SetSync(keyWorker, binary.BigEndian.AppendUint64(v, uint64(startAboveMS)))
}

// ClusterID returns the identity of the cluster this directory belongs to,
// "" when it belongs to none yet.
func (s *Store) ClusterID() (string, error) {
	v, _, err := s.Get(keyCluster)
	return string(v), err
}

// SetClusterIDSync records, durably, the cluster this directory belongs to:
// at bootstrap, or when a cluster admits the node.
func (s *Store) SetClusterIDSync(id string) error { return s.SetSync(keyCluster, []byte(id)) }

// EnsureLayout stores layout on first start; later it refuses a different
// one with an error that names both.
func (s *Store) EnsureLayout(layout string) error {
	v, ok, err := s.Get(keyLayout)
	if err != nil {
		return err
	}
	if !ok {
		return s.SetSync(keyLayout, []byte(layout))
	}
	if string(v) != layout {
		return fmt.Errorf("%w: %s holds IDs of layout [%s], this start asks for [%s]; start with the stored layout's flags or a new --dir",
			ErrLayoutMismatch, s.dir, v, layout)
	}
	return nil
}

// NodeID returns the node ID kept in the data directory. On first start it
// stores want, or a generated ID when want is empty; a different want later
// is refused, since a node's identity is its data directory.
func (s *Store) NodeID(want string) (string, error) {
	v, ok, err := s.Get(keyNodeID)
	if err != nil {
		return "", err
	}
	if ok {
		if want != "" && want != string(v) {
			return "", fmt.Errorf("%s belongs to node %q, not %q: use a new --dir for a new node", s.dir, v, want)
		}
		return string(v), nil
	}
	if want == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		want = hex.EncodeToString(b[:])
	}
	return want, s.SetSync(keyNodeID, []byte(want))
}

// quietLogger sends Pebble's own chatter to slog at debug level.
type quietLogger struct{}

func (quietLogger) Infof(format string, args ...any) {
	slog.Debug("pebble", "msg", fmt.Sprintf(format, args...))
}

func (quietLogger) Errorf(format string, args ...any) {
	slog.Error("pebble", "msg", fmt.Sprintf(format, args...))
}

// Fatalf is Pebble finding it cannot go on (on-disk corruption met by a
// read or a compaction, at start or later): the process stops, exit 1,
// with one line that, for corruption, names the file and the remedy.
func (quietLogger) Fatalf(format string, args ...any) {
	slog.Error("the node stops", "err", pebbleFatal(fmt.Sprintf(format, args...)))
	os.Exit(1)
}

// pebbleFatal is the error of Pebble's fatal message msg: its first line
// (the rest is a stack trace), as a damaged directory when msg says
// corruption.
func pebbleFatal(msg string) error {
	msg, _, _ = strings.Cut(msg, "\n")
	if strings.Contains(msg, "corruption") {
		return fmt.Errorf("%w: %s; %s", ErrDamaged, msg, remedyDamaged)
	}
	return fmt.Errorf("pebble: %s", msg)
}

// Batch is a group of writes applied atomically by Commit or CommitSync.
type Batch struct {
	s *Store
	b *pebble.Batch
}

// NewBatch starts a batch.
func (s *Store) NewBatch() *Batch { return &Batch{s: s, b: s.db.NewBatch()} }

// Set adds a write of key to the batch.
func (b *Batch) Set(key string, value []byte) { b.b.Set([]byte(key), value, nil) }

// DeletePrefix adds the removal of every key that starts with prefix.
func (b *Batch) DeletePrefix(prefix string) {
	end := []byte(prefix)
	end[len(end)-1]++
	b.b.DeleteRange([]byte(prefix), end, nil)
}

// Commit applies the batch without waiting for the disk.
func (b *Batch) Commit() error {
	if err := b.s.Room(); err != nil {
		return err
	}
	return b.b.Commit(pebble.NoSync)
}

// CommitSync applies the batch and returns once it is durable.
func (b *Batch) CommitSync() error {
	if err := b.s.Room(); err != nil {
		return err
	}
	defer b.s.timeSync()()
	return b.b.Commit(pebble.Sync)
}

// Len is the size of the batch's writes, in bytes.
func (b *Batch) Len() int { return b.b.Len() }

// Scan calls fn for each key that starts with prefix, in key order.
func (s *Store) Scan(prefix string, fn func(key string, value []byte) error) error {
	return scan(s.db, prefix, "", fn)
}

// KeysFrom is up to n keys that start with prefix and sort at or after
// prefix+from, in key order, prefix removed.
func (s *Store) KeysFrom(prefix, from string, n int) ([]string, error) {
	var keys []string
	err := scan(s.db, prefix, from, func(k string, _ []byte) error {
		if len(keys) == n {
			return errEnough
		}
		keys = append(keys, k[len(prefix):])
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return keys, err
}

// Count is the number of keys that start with prefix.
func (s *Store) Count(prefix string) (int, error) {
	n := 0
	err := scan(s.db, prefix, "", func(string, []byte) error { n++; return nil })
	return n, err
}

// errEnough ends a scan early.
var errEnough = errors.New("enough")

// scan calls fn for each key of r that starts with prefix and sorts at or
// after prefix+from, in key order.
func scan(r pebble.Reader, prefix, from string, fn func(key string, value []byte) error) error {
	end := []byte(prefix)
	end[len(end)-1]++
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: end})
	if err != nil {
		return err
	}
	defer it.Close()
	valid := it.First()
	if from != "" {
		valid = it.SeekGE([]byte(prefix + from))
	}
	for ; valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(string(it.Key()), v); err != nil {
			return err
		}
	}
	return it.Error()
}

// Snapshot is the store as it was at one moment, read while writes go on.
// It pins the files it reads until Close.
type Snapshot struct{ snap *pebble.Snapshot }

// Snapshot takes a Snapshot of the store now.
func (s *Store) Snapshot() *Snapshot { return &Snapshot{snap: s.db.NewSnapshot()} }

// Get returns the value of key in the snapshot, with ok false when there is none.
func (p *Snapshot) Get(key string) (value []byte, ok bool, err error) { return get(p.snap, key) }

// Scan calls fn for each key of the snapshot that starts with prefix, in
// key order. The value is valid only during the call.
func (p *Snapshot) Scan(prefix string, fn func(key string, value []byte) error) error {
	return scan(p.snap, prefix, "", fn)
}

// Close releases the snapshot.
func (p *Snapshot) Close() error { return p.snap.Close() }
