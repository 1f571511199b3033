package cluster

import "idserver/persist"

// An allocation entry names, for each item, the node and process boot it
// is for. A group commit's items mostly come from a few nodes (one, on a
// single node), so entryAllocRuns writes each node and boot once per run
// of items that share them, where entryAllocBy writes them per item.
//
// Only a cluster whose meta says tagFormatCompact commits entryAllocRuns:
// that format is named by the entryInit of a build that applies both, and
// a build older than it cannot join such a cluster (it refuses that
// entryInit, and the compact snapshot), so every member applies it.

// allocEntry is the log entry allocating items, in the shape the cluster's
// members all apply.
func (c *Cluster) allocEntry(items []allocItem) encoder {
	if c.fsm.tagFormat() < tagFormatCompact {
		e := newEntry(entryAllocBy).uvarint(uint64(len(items)))
		for _, it := range items {
			e = e.string(it.Tag).varint(it.N).string(it.Node).uvarint(it.Boot)
		}
		return e
	}
	return allocRunsEntry(items)
}

// allocRunsEntry is items as an entryAllocRuns.
func allocRunsEntry(items []allocItem) encoder {
	e := newEntry(entryAllocRuns).uvarint(uint64(len(items)))
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j].Node == items[i].Node && items[j].Boot == items[i].Boot {
			j++
		}
		e = e.string(items[i].Node).uvarint(items[i].Boot).uvarint(uint64(j - i))
		for _, it := range items[i:j] {
			e = e.string(it.Tag).varint(it.N)
		}
		i = j
	}
	return e
}

func (f *fsm) applyAllocRuns(d *decoder, b *persist.Batch, _ *changes) any {
	count := d.uvarint()
	results := make([]allocResult, 0, min(count, 1024))
	for uint64(len(results)) < count {
		node, boot, k := d.string(), d.uvarint(), d.uvarint()
		if k == 0 || k > count-uint64(len(results)) {
			d.fail("a run of allocations past the entry's count")
		}
		for range k {
			tag, n := d.string(), d.varint()
			results = append(results, f.allocateOne(b, tag, n, node, boot))
		}
	}
	d.end()
	return results
}

// tagFormat is the format the cluster writes tags in (meta.TagFormat).
func (f *fsm) tagFormat() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.TagFormat
}
