package persist

// What tells a restart of this directory from a start on a restored copy
// of it: the incarnation (a count of starts, kept here and committed to the
// cluster) and the directory marker (a file whose inode a copy cannot keep).

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

const (
	keyIncarnation = "node/incarnation"
	keyMarker      = "node/marker"
)

// MarkerFile is the directory marker's name in the data directory.
const MarkerFile = "DIRECTORY-MARKER"

const markerText = `This file marks this idserver data directory. Its inode number and
creation time are recorded in the directory's Pebble database: a copy of the
directory (cp -a, rsync, tar) gets a new file here, and a start on the copy
is refused, since the copy may be older than what the node issued. To start
from a copy safely, use: idserver restore COPY --dir NEWDIR
`

// Incarnation is the number of this directory's latest start (0 before the
// first).
func (s *Store) Incarnation() (uint64, error) {
	v, ok, err := s.Get(keyIncarnation)
	if err != nil || !ok {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: %s has %d bytes", ErrCorrupt, keyIncarnation, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// SetIncarnationSync stores the incarnation durably.
func (s *Store) SetIncarnationSync(n uint64) error {
	return s.SetSync(keyIncarnation, binary.BigEndian.AppendUint64(nil, n))
}

// NextIncarnationSync counts a start: it stores the incarnation one above
// the stored one, durably, and returns it. A node calls it at each start
// before it issues anything, and carries the number in its lease renewals,
// so the cluster knows the latest start each node ran.
func (s *Store) NextIncarnationSync() (uint64, error) {
	n, err := s.Incarnation()
	if err != nil {
		return 0, err
	}
	return n + 1, s.SetIncarnationSync(n + 1)
}

// markerStat is what identifies the marker file: its inode number and its
// birth time (statx), or its change time where the file system keeps no
// birth time. A copy makes a new file: another inode, born now.
type markerStat struct {
	Ino     uint64 `json:"ino"`
	BirthNS int64  `json:"birth_ns,omitempty"`
	CtimeNS int64  `json:"ctime_ns,omitempty"` // only when there is no birth time
}

// CheckCopy tells whether this directory is a copy of the one the store
// was last started in: "" when the marker file is the one recorded (or
// nothing was recorded yet: a directory made before markers, or a first
// start), else what differs. It detects copies that make new files (cp -a,
// rsync, tar, a restore from most backup tools); it cannot detect a copy
// that keeps inodes and birth times: a file-system snapshot rolled back, a
// block-level image, hard links (cp -al).
func (s *Store) CheckCopy() (string, error) {
	v, ok, err := s.Get(keyMarker)
	if err != nil || !ok {
		return "", err
	}
	var want markerStat
	if err := json.Unmarshal(v, &want); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrCorrupt, keyMarker, err)
	}
	path := filepath.Join(s.dir, MarkerFile)
	got, err := statMarker(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("%s is missing, but the directory's database says this node made it (inode %d): "+
			"the directory is a copy, or the file was removed", path, want.Ino), nil
	}
	if err != nil {
		return "", err
	}
	if got != want {
		return fmt.Sprintf("%s is not the file this node made (inode %d, born %d; found inode %d, born %d): "+
			"the directory is a copy (cp -a, rsync, tar, a backup restored in place)", path,
			want.Ino, want.BirthNS+want.CtimeNS, got.Ino, got.BirthNS+got.CtimeNS), nil
	}
	return "", nil
}

// RecordMarkerSync makes sure the marker file exists and records it in the
// database, durably: after a first start, a start on a directory made
// before markers, or a start on a copy that was made safe.
func (s *Store) RecordMarkerSync() error {
	path := filepath.Join(s.dir, MarkerFile)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		if err := writeMarker(path); err != nil {
			return err
		}
	}
	m, err := statMarker(path)
	if err != nil {
		return err
	}
	v, _ := json.Marshal(m)
	return s.SetSync(keyMarker, v)
}

// RenewMarkerSync replaces the marker file with a new one and records it:
// a copy that was made safe becomes the directory the node runs in.
func (s *Store) RenewMarkerSync() error {
	if err := os.Remove(filepath.Join(s.dir, MarkerFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.RecordMarkerSync()
}

// writeMarker creates the marker file and makes it and its directory
// entry durable.
func writeMarker(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(markerText); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return SyncDirs(filepath.Dir(path))
}

// StoredIdentity is the node ID and layout the directory holds ("" for
// either when it holds none): what a backup of it records.
func (s *Store) StoredIdentity() (nodeID, layout string, err error) {
	id, _, err := s.Get(keyNodeID)
	if err != nil {
		return "", "", err
	}
	l, _, err := s.Get(keyLayout)
	return string(id), string(l), err
}
