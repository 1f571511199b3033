package persist

// What Open checks of the Pebble files before it opens them, and the record
// of a --recover. Pebble opens a directory whose write-ahead log was
// removed as if nothing happened, with the state of its last flush: the
// synced writes since (the snowflake high-water, the worker ID, the
// cluster identity) silently gone. So Open looks for the log first.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrDamaged: the data directory is not whole (files missing or damaged).
var ErrDamaged = errors.New("data directory is damaged")

// Version edit tags of Pebble's MANIFEST (internal/manifest/version_edit.go
// in pebble v2.1.7): the log number comes before any other field but the
// comparator, so those are all that need decoding.
const (
	manifestComparator = 1
	manifestLogNumber  = 2
)

// Remedy is what an operator does with node (its ID; "this node" when
// not known) whose data directory is damaged or not whole.
func Remedy(node string) string {
	return fmt.Sprintf("restore the node from a backup (idserver restore BACKUP --dir NEWDIR), or, while the cluster keeps a quorum, "+
		"CLUSTER FORGET %s on a live member and start this node on an empty --dir with --join (raft/ was left as it was)", node)
}

// remedyDamaged is Remedy where the node's ID is not known.
var remedyDamaged = Remedy("this node")

// checkPebbleFiles refuses a Pebble directory that cannot be whole: one
// missing while the data directory holds Raft state (cluster's raft/), and one
// whose MANIFEST names a write-ahead log that is not there.
func checkPebbleFiles(dir string) error {
	pdir := filepath.Join(dir, "pebble")
	desc, err := pebble.Peek(pdir, vfs.Default)
	if errors.Is(err, os.ErrNotExist) || err == nil && !desc.Exists {
		if _, err := os.Stat(filepath.Join(dir, "raft")); err == nil {
			return fmt.Errorf("%w: %s holds Raft state but %s holds no Pebble database (deleted?): the node's state is lost; %s",
				ErrDamaged, filepath.Join(dir, "raft"), pdir, remedyDamaged)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v; %s", ErrDamaged, pdir, err, remedyDamaged)
	}
	need, err := unflushedLog(desc.ManifestFilename)
	if err != nil {
		return fmt.Errorf("%w: %s: %v; %s", ErrDamaged, desc.ManifestFilename, err, remedyDamaged)
	}
	entries, err := os.ReadDir(pdir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if num, ok := strings.CutSuffix(e.Name(), ".log"); ok {
			if n, err := strconv.ParseUint(num, 10, 64); err == nil && n >= need {
				return nil
			}
		}
	}
	holds := fmt.Sprintf("names write-ahead log %06d.log (or a later one) as holding the writes since its last flush", need)
	if need == 0 {
		holds = "records no flush yet, so its write-ahead log holds every write"
	}
	return fmt.Errorf("%w: %s %s, and no such .log file is in %s (removed?): the synced writes it held are lost; %s",
		ErrDamaged, desc.ManifestFilename, holds, pdir, remedyDamaged)
}

// unflushedLog reads a MANIFEST and returns the number of the oldest
// write-ahead log that holds writes not yet flushed (the last log number
// it records; 0 when it records none yet).
func unflushedLog(manifest string) (uint64, error) {
	f, err := os.Open(manifest)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rr := record.NewReader(f, 0)
	var need uint64
	for edits := 0; ; edits++ {
		r, err := rr.Next()
		if edits == 0 && (err == io.EOF || errors.Is(err, record.ErrInvalidChunk) || errors.Is(err, record.ErrZeroedChunk)) {
			// Pebble writes a MANIFEST's first edit before it makes it current.
			size := int64(-1)
			if st, err := f.Stat(); err == nil {
				size = st.Size()
			}
			return 0, fmt.Errorf("holds no readable version edit (%d bytes): the list of the database's files is lost", size)
		}
		if err == io.EOF || errors.Is(err, record.ErrInvalidChunk) || errors.Is(err, record.ErrZeroedChunk) {
			break // a torn tail: Pebble ignores it the same way
		}
		if err != nil {
			return 0, err
		}
		edit, err := io.ReadAll(r)
		if err != nil {
			break
		}
		for len(edit) > 0 {
			tag, n := binary.Uvarint(edit)
			if n <= 0 {
				break
			}
			edit = edit[n:]
			if tag == manifestComparator {
				size, n := binary.Uvarint(edit)
				if n <= 0 || uint64(len(edit)-n) < size {
					break
				}
				edit = edit[n+int(size):]
				continue
			}
			if tag == manifestLogNumber {
				if v, n := binary.Uvarint(edit); n > 0 {
					need = v
				}
			}
			break
		}
	}
	return need, nil // 0 before the first flush: every log counts, and Pebble always has one
}

// Recovery is the record of a --recover: the cluster this node restarted
// alone, the new identity it took, and when (ID time, ms).
type Recovery struct {
	From string `json:"from"`
	To   string `json:"to"`
	AtMS int64  `json:"at_ms"`
}

const keyRecovery = "node/recovery"

// SetRecoverySync records, durably, a completed --recover.
func (s *Store) SetRecoverySync(r Recovery) error {
	v, _ := json.Marshal(r)
	return s.SetSync(keyRecovery, v)
}

// LastRecovery returns the last --recover this node completed, if any.
func (s *Store) LastRecovery() (Recovery, bool, error) {
	var r Recovery
	v, ok, err := s.Get(keyRecovery)
	if err != nil || !ok {
		return r, false, err
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, false, fmt.Errorf("%w: %s: %v", ErrCorrupt, keyRecovery, err)
	}
	return r, true, nil
}

// SyncDirs fsyncs each directory, so that the names created in it so far
// survive a power cut (a file's own fsync does not make its name durable).
func SyncDirs(dirs ...string) error {
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("fsync %s: %w", dir, err)
		}
	}
	return nil
}

// WriteFileSync writes path through a temporary file, durably: the file
// and its name in its directory are synced before it returns.
func WriteFileSync(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600) // one a crash left is written over
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDirs(filepath.Dir(path))
}
