package persist

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
)

// Lookup reads key as Get does, with every level's Bloom filter consulted,
// the last level's too (Pebble's Get reads a block of the last level for
// a key it does not hold): a key that is not there, such as a new tag's,
// costs a filter probe per level instead of a block read.
func (s *Store) Lookup(key string) (value []byte, ok bool, err error) {
	k := []byte(key)
	it, err := s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return nil, false, err
	}
	if it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k) {
		v, verr := it.ValueAndErr()
		if verr != nil {
			it.Close()
			return nil, false, verr
		}
		value, ok = append([]byte(nil), v...), true
	}
	if err := it.Close(); err != nil {
		return nil, false, err
	}
	return value, ok, nil
}
