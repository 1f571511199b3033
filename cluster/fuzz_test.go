package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzFSMApply: any log entry either applies, or is refused with the
// state machine's own "cluster: ..." panic; never an index error, a huge
// allocation, or a state that breaks its invariants.
func FuzzFSMApply(f *testing.F) {
	f.Add([]byte(newEntry(entryAlloc).uvarint(2).string("a").varint(10).string("b").varint(1)))
	f.Add([]byte(newEntry(entrySet).string("a").varint(100)))
	f.Add([]byte(newEntry(entryJoin).string("n1").string("r").string("p").varint(1000).varint(10000)))
	f.Add([]byte(newEntry(entryLease).string("n1").varint(0).varint(20000)))
	f.Add([]byte(newEntry(entryInit).string("c").string("l")))
	f.Add([]byte(newEntry(entryAddrs).string("n1").string("r2").string("p2")))
	f.Add([]byte(newEntry(entryForget).string("n1")))
	f.Add([]byte(newEntry(entryFresh).string("n1").varint(0).varint(30000).varint(10000)))
	f.Add([]byte{entryAlloc, 0xff, 0xff, 0xff, 0xff, 0x0f})
	store := openStore(f)
	fm, err := newFSM(store, 15)
	if err != nil {
		f.Fatal(err)
	}
	index := uint64(0)
	f.Fuzz(func(t *testing.T, data []byte) {
		index++
		func() {
			defer func() {
				if r := recover(); r != nil {
					if msg, ok := r.(string); !ok || !strings.HasPrefix(msg, "cluster: ") {
						t.Fatalf("entry %x: unexpected panic %v", data, r)
					}
				}
			}()
			fm.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
		}()
		fm.mu.RLock()
		defer fm.mu.RUnlock()
		held := map[int64]string{}
		for node, m := range fm.meta.Members {
			if other, dup := held[m.Worker]; dup {
				t.Fatalf("worker %d held by %s and %s", m.Worker, other, node)
			}
			held[m.Worker] = node
			if m.Worker < 0 || m.Worker > fm.maxWorker {
				t.Fatalf("worker %d out of range", m.Worker)
			}
		}
		for node, m := range fm.meta.Members {
			for _, w := range m.Retired {
				if other, dup := held[w]; dup && other != node {
					t.Fatalf("worker %d retired by %s and held by %s", w, node, other)
				}
			}
		}
		fm.store.Scan(keyTagBase, func(k string, v []byte) error {
			if ts, err := decodeTag(v); err != nil || ts.high() < 0 {
				t.Fatalf("tag %q went negative or does not decode: %+v %v", k, ts, err)
			}
			return nil
		})
	})
}
