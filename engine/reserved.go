package engine

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// WorkerRange is the worker IDs First..Last, both included.
type WorkerRange struct{ First, Last int64 }

// ParseWorkerRanges reads a list of worker IDs and ranges ("0-15,100"):
// comma-separated, each a decimal ID or first-last with first <= last,
// blanks around them ignored. The result is sorted and merged: ranges
// that overlap or touch become one. An empty s is no range.
func ParseWorkerRanges(s string) ([]WorkerRange, error) {
	var rs []WorkerRange
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			if strings.TrimSpace(s) == "" {
				return nil, nil
			}
			return nil, fmt.Errorf("%q: an empty item between commas", s)
		}
		first, last, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q: %q is not a worker ID (0 or more)", s, first)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(strings.TrimSpace(last), 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("%q: %q is not a range first-last with first <= last", s, part)
			}
		}
		rs = append(rs, WorkerRange{a, b})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].First < rs[j].First })
	merged := rs[:1]
	for _, r := range rs[1:] {
		top := &merged[len(merged)-1]
		if r.First <= top.Last+1 {
			top.Last = max(top.Last, r.Last)
			continue
		}
		merged = append(merged, r)
	}
	return merged, nil
}

// FormatWorkerRanges writes ranges as ParseWorkerRanges reads them:
// "0-15,100".
func FormatWorkerRanges(rs []WorkerRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.FormatInt(r.First, 10)
		if r.Last != r.First {
			s[i] += "-" + strconv.FormatInt(r.Last, 10)
		}
	}
	return strings.Join(s, ",")
}

// ReservedWorkers is the layout's reserved worker IDs (Layout.Reserved),
// nil when none. A layout that passed Validate always parses.
func (l Layout) ReservedWorkers() []WorkerRange {
	rs, _ := ParseWorkerRanges(l.Reserved)
	return rs
}

// IsReserved says whether the layout reserves worker ID w.
func (l Layout) IsReserved(w int64) bool {
	for _, r := range l.ReservedWorkers() {
		if w >= r.First && w <= r.Last {
			return true
		}
	}
	return false
}

// validateReserved checks Reserved: canonical (as FormatWorkerRanges
// writes it), within 0..MaxWorker, and leaving a worker ID to assign.
func (l Layout) validateReserved() error {
	if l.Reserved == "" {
		return nil
	}
	rs, err := ParseWorkerRanges(l.Reserved)
	switch {
	case err != nil:
		return fmt.Errorf("--reserved-workers %v", err)
	case FormatWorkerRanges(rs) != l.Reserved:
		return fmt.Errorf("--reserved-workers %q is not written as %q", l.Reserved, FormatWorkerRanges(rs))
	case rs[len(rs)-1].Last > l.MaxWorker():
		return fmt.Errorf("--reserved-workers %s: worker ID %d does not fit in %d worker bits (0..%d)", l.Reserved, rs[len(rs)-1].Last, l.WorkerBits, l.MaxWorker())
	}
	var n int64
	for _, r := range rs {
		n += r.Last - r.First + 1
	}
	if n > l.MaxWorker() {
		return fmt.Errorf("--reserved-workers %s reserves all %d worker IDs of %d worker bits: at least one must be left for idserver's nodes",
			l.Reserved, l.MaxWorker()+1, l.WorkerBits)
	}
	return nil
}

// FirstIDAt is the smallest ID the layout can make at now: time now, worker
// 0, field 0. Every ID made at now or later is at least it.
func (l Layout) FirstIDAt(now time.Time) int64 {
	units := (now.UnixMilli() - l.Epoch.UnixMilli()) / l.UnitMS()
	return max(units, 0) << (l.WorkerBits + l.SeqBits)
}

// CheckAbove reports whether every ID the layout makes from now on sorts
// above id: its first ID at now (FirstIDAt) must be larger. Otherwise the
// error says when this layout's IDs pass id, and the latest --epoch whose
// IDs sort above it now.
func (l Layout) CheckAbove(id int64, now time.Time) error {
	if id < 0 {
		return fmt.Errorf("--above-id %d must not be negative", id)
	}
	first := l.FirstIDAt(now)
	if first > id {
		return nil
	}
	shift := l.WorkerBits + l.SeqBits
	units := id>>shift + 1 // the first time unit whose IDs are all above id
	if units >= 1<<l.TimeBits {
		return fmt.Errorf("--above-id %d: no ID of this layout (%d time bits of %v, %d bits in all) is above it: "+
			"it needs more time bits, or a coarser --time-unit, or more --id-bits", id, l.TimeBits, l.unitName(), l.idBits())
	}
	pass := time.UnixMilli(l.Epoch.UnixMilli() + units*l.UnitMS()).UTC()
	epoch := time.UnixMilli(now.UnixMilli() - units*l.UnitMS()).UTC()
	return fmt.Errorf("--above-id %d: this layout's IDs are at %d now (--epoch %s), not above it, and pass it only at %s; "+
		"an --epoch at or before %s makes them sort above it now",
		id, first, l.Epoch.UTC().Format(time.RFC3339Nano), pass.Format(time.RFC3339Nano), epoch.Format(time.RFC3339Nano))
}
