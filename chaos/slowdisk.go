package chaos

import (
	"context"
	"fmt"
)

// FSlowDisk makes every fsync of a node's disk (its lazyfs) wait
// Fault.Amount for Fault.Hold: a failing disk under a live node.
const FSlowDisk = "slow-disk"

// slowDisk delays n's syncs for f.Hold, then ends the delay.
func (nm *nemesis) slowDisk(ctx context.Context, n *node, f Fault, ev *FaultEvent) {
	disk := nm.c.pm.lazy[n.slot]
	if disk == nil {
		ev.Detail = "no lazyfs for this slot"
		return
	}
	ev.Detail = fmt.Sprintf("every fsync of %s waits %v", n.nodeID, f.Amount)
	disk.SetSyncDelay(f.Amount)
	nm.sleep(ctx, f.Hold)
	disk.SetSyncDelay(0)
}
