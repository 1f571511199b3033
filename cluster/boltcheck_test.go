package cluster

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestBoltCheckAsBboltChecks: a file bbolt wrote passes the walk; a meta
// page whose checksum is zeroed, or a page with two type flags, is refused
// as bbolt v1.4 and later refuse them.
func TestBoltCheckAsBboltChecks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("logs"))
		if err != nil {
			return err
		}
		for i := range 200 {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := checkBoltFile(path); err != nil {
		t.Fatalf("a file bbolt wrote: %v", err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int64(binary.LittleEndian.Uint32(whole[boltPageHeader+8:]))
	for _, c := range []struct {
		name string
		hurt func(b []byte)
		want string
	}{
		{"meta page 0's checksum zeroed", func(b []byte) { clear(b[boltPageHeader+56 : boltPageHeader+64]) }, "meta page 0 is invalid (meta page checksum mismatch)"},
		{"a page with the leaf and branch flags", func(b []byte) {
			meta := b[boltPageHeader:]
			if binary.LittleEndian.Uint64(b[pageSize+boltPageHeader+48:]) > binary.LittleEndian.Uint64(meta[48:]) {
				meta = b[pageSize+boltPageHeader:]
			}
			root := int64(binary.LittleEndian.Uint64(meta[16:]))
			binary.LittleEndian.PutUint16(b[root*pageSize+8:], boltLeaf|boltBranch)
		}, "invalid page type 0x3"},
	} {
		b := append([]byte(nil), whole...)
		c.hurt(b)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := checkBoltFile(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
