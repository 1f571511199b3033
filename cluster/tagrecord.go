package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// A tag's record in the store is one of three shapes, told apart by its
// first byte and length:
//
//   - 0xfe and the compact record below, written by a state machine whose
//     cluster was created by a build that reads it (meta.TagFormat);
//   - 0xff and the tag's JSON, which every build reads, written otherwise;
//   - 16 bytes, max_id and floor, written before SET could lower a tag,
//     with no record of who was allocated what: all of it counts as
//     possibly issued.
//
// The compact record is:
//
//	0xfe, flags, varint max_id, uvarint rev,
//	[varint floor: flags&1], [varint bound: flags&2],
//	[uvarint count, then per node in name order: uvarint len, name,
//	 8 bytes boot, varint max_id-last, varint before: flags&4],
//	[one zero byte: flags&8]
//
// A tag allocated by one node in one process costs the name of the node,
// its boot and a few bytes.
//
// The store never holds a compact record of 16 bytes: a build that does
// not read compact records reads any 16-byte record as the oldest shape
// (a wrong max_id, below what was issued as often as above), where it
// refuses every other length. One that would be 16 bytes takes the zero
// byte (flags&8) and is 17.
const (
	tagJSON    byte = 0xff
	tagCompact byte = 0xfe

	tagHasFloor byte = 1
	tagHasBound byte = 2
	tagHasNodes byte = 4
	tagPadded   byte = 8
)

// Tag formats a state machine writes (meta.TagFormat).
const (
	tagFormatJSON    = 0 // what every build reads
	tagFormatCompact = 1 // tagCompact records and compact snapshots (snapshot.go)
)

// encodeTag is t's record in the given format.
func encodeTag(t tagState, format int) []byte {
	if format < tagFormatCompact {
		b, _ := json.Marshal(t)
		return append([]byte{tagJSON}, b...)
	}
	b := appendCompactTag(make([]byte, 0, 17+len(t.Nodes)*32), t)
	if len(b) == 16 {
		b[1] |= tagPadded
		b = append(b, 0)
	}
	return b
}

func appendCompactTag(b []byte, t tagState) []byte {
	return appendTag(b, t, nil)
}

// appendTag appends t's compact record; with refs, each node and boot is
// written as its number in refs (nodeRefs).
func appendTag(b []byte, t tagState, refs *nodeRefs) []byte {
	var flags byte
	if t.Floor != 0 {
		flags |= tagHasFloor
	}
	if t.Bound != 0 {
		flags |= tagHasBound
	}
	if len(t.Nodes) > 0 {
		flags |= tagHasNodes
	}
	b = append(b, tagCompact, flags)
	b = binary.AppendVarint(b, t.MaxID)
	b = binary.AppendUvarint(b, t.Rev)
	if flags&tagHasFloor != 0 {
		b = binary.AppendVarint(b, t.Floor)
	}
	if flags&tagHasBound != 0 {
		b = binary.AppendVarint(b, t.Bound)
	}
	if flags&tagHasNodes == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(t.Nodes)))
	names := make([]string, 0, len(t.Nodes))
	for name := range t.Nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		n := t.Nodes[name]
		if refs != nil {
			b = refs.append(b, nodeRef{name, n.Boot})
		} else {
			b = binary.AppendUvarint(b, uint64(len(name)))
			b = append(b, name...)
			b = binary.BigEndian.AppendUint64(b, n.Boot)
		}
		b = binary.AppendVarint(b, t.MaxID-n.Last)
		b = binary.AppendVarint(b, n.Before)
	}
	return b
}

func decodeTag(v []byte) (tagState, error) {
	var t tagState
	switch {
	case len(v) > 0 && v[0] == tagJSON:
		err := json.Unmarshal(v[1:], &t)
		return t, err
	case len(v) > 0 && v[0] == tagCompact:
		return decodeCompactTag(v[1:], nil)
	case len(v) == 16:
		t.MaxID, t.Floor = int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
		t.Bound = t.MaxID
		return t, nil
	}
	return t, fmt.Errorf("%d bytes", len(v))
}

var errShortTag = errors.New("compact tag record cut short")

// decodeCompactTag reads a compact record after its first byte; with
// refs, its nodes and boots are numbers in refs.
func decodeCompactTag(v []byte, refs *nodeRefs) (tagState, error) {
	var t tagState
	r := recordReader{b: v}
	flags := r.byte()
	t.MaxID, t.Rev = r.varint(), r.uvarint()
	if flags&tagHasFloor != 0 {
		t.Floor = r.varint()
	}
	if flags&tagHasBound != 0 {
		t.Bound = r.varint()
	}
	if flags&tagHasNodes != 0 {
		count := r.uvarint()
		if r.err == nil && count > uint64(len(r.b)) {
			r.err = errShortTag
		}
		if r.err == nil {
			t.Nodes = make(map[string]nodeAlloc, count)
		}
		for range count {
			if r.err != nil {
				break
			}
			var ref nodeRef
			if refs != nil {
				ref = refs.read(&r)
			} else {
				ref.node = string(r.bytes(r.uvarint()))
				ref.boot = binary.BigEndian.Uint64(r.bytes(8))
			}
			n := nodeAlloc{Boot: ref.boot}
			n.Last = t.MaxID - r.varint()
			n.Before = r.varint()
			t.Nodes[ref.node] = n
		}
	}
	if flags&tagPadded != 0 && r.byte() != 0 && r.err == nil {
		r.err = errors.New("a compact tag record's padding is not zero")
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the compact tag record", len(r.b))
	}
	if flags&^(tagHasFloor|tagHasBound|tagHasNodes|tagPadded) != 0 && r.err == nil {
		r.err = fmt.Errorf("compact tag record flags %#x", flags)
	}
	return t, r.err
}

// recordReader reads a record, keeping its first error (later reads
// answer zeros).
type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = cmpErr(r.err, errShortTag)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *recordReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShortTag
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShortTag
		return 0
	}
	r.b = r.b[n:]
	return v
}

var zeros [8]byte

// bytes is the next n bytes (zeros, at most 8 of them, after an error).
func (r *recordReader) bytes(n uint64) []byte {
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = errShortTag
	}
	if r.err != nil {
		return zeros[:min(n, 8)]
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func cmpErr(err, or error) error {
	if err != nil {
		return err
	}
	return or
}

// nodeRefs numbers the (node, boot) pairs of a compact snapshot in the
// order they first appear in it: a tag names a pair by its number, and the
// first to name it also writes it (uvarint len, node, 8 bytes boot) after
// the number. A snapshot's tags are allocated to a few nodes in a few
// processes each, so most name a pair in a byte.
type nodeRefs struct {
	index map[nodeRef]uint64 // the writer's
	list  []nodeRef          // the reader's
}

type nodeRef struct {
	node string
	boot uint64
}

func (refs *nodeRefs) append(b []byte, ref nodeRef) []byte {
	if i, ok := refs.index[ref]; ok {
		return binary.AppendUvarint(b, i)
	}
	if refs.index == nil {
		refs.index = map[nodeRef]uint64{}
	}
	i := uint64(len(refs.index))
	refs.index[ref] = i
	b = binary.AppendUvarint(b, i)
	b = binary.AppendUvarint(b, uint64(len(ref.node)))
	b = append(b, ref.node...)
	return binary.BigEndian.AppendUint64(b, ref.boot)
}

func (refs *nodeRefs) read(r *recordReader) nodeRef {
	i := r.uvarint()
	switch {
	case r.err != nil:
		return nodeRef{}
	case i < uint64(len(refs.list)):
		return refs.list[i]
	case i > uint64(len(refs.list)):
		r.err = fmt.Errorf("node %d named before node %d", i, len(refs.list))
		return nodeRef{}
	}
	ref := nodeRef{node: string(r.bytes(r.uvarint()))}
	ref.boot = binary.BigEndian.Uint64(r.bytes(8))
	if r.err == nil {
		refs.list = append(refs.list, ref)
	}
	return ref
}
