package cluster

// Reserved worker IDs (engine.Layout.Reserved): those of legacy snowflake
// generators that still run beside the cluster. The state machine gives
// none of them to a member, at a join or as a fresh worker ID, and counts
// none of them free. They are part of the layout, which every member
// shares (a join with another layout is refused), so every member's state
// machine skips the same ones.

import "fmt"

// isReserved says whether worker ID w is reserved.
func (f *fsm) isReserved(w int64) bool {
	for _, r := range f.reserved {
		if w >= r.First && w <= r.Last {
			return true
		}
	}
	return false
}

// assignable counts the worker IDs a member can be given: all but the
// reserved ones.
func (f *fsm) assignable() int64 {
	n := f.maxWorker + 1
	for _, r := range f.reserved {
		n -= min(r.Last, f.maxWorker) - r.First + 1
	}
	return n
}

// reservedNote says, for a refusal, how many worker IDs are reserved ("" when none).
func (f *fsm) reservedNote() string {
	if len(f.reserved) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d more are reserved by --reserved-workers)", f.maxWorker+1-f.assignable())
}
