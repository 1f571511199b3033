package node

// A clock that went back further than --max-borrow (docs/guarantees.md,
// promise 3): the
// node takes a fresh worker ID from the cluster (cluster.FreshWorker: one
// whose previous lease ended below this node's clock) and issues on it from
// the wall clock on, instead of answering CLOCKBACK until the clock catches
// up with the IDs it issued. The old worker ID's lease is no longer renewed;
// the cluster hands it out again only above its end. A restart after the
// clock went back takes the same path: its high-water is ahead of the clock.
//
// The order matters for a crash at any point: the cluster commits the fresh
// worker ID, the node stores it in its directory (Sync), and only then does
// the generator lower the stored high-water to the new worker's window. A
// restart between the first two finds its directory's worker retired and
// takes the one the cluster gave it (workerID); between the last two it
// finds the old high-water ahead of the clock and takes another.

import (
	"context"
	"errors"
	"slices"
	"time"

	"idserver/cluster"
)

// freshRetry is how often a node whose clock went back asks again for a
// fresh worker ID after a refusal (none free below its clock, no quorum).
const freshRetry = 250 * time.Millisecond

// clockWentBack reports whether the generator's clock went back further
// than the borrow covers.
func (n *Node) clockWentBack() bool {
	return n.Gen.Status().ClockBehindMS > n.cfg.MaxBorrow.Milliseconds()
}

// freshWorker takes a fresh worker ID and moves the generator to it. On a
// refusal the generator keeps answering CLOCKBACK, saying why.
func (n *Node) freshWorker(ctx context.Context) error {
	st := n.Gen.Status()
	n.Gen.SetClockBackProblem("taking a fresh worker ID")
	fctx, cancel := context.WithTimeout(ctx, n.Cluster.Timing().Call)
	w, above, lease, err := n.Cluster.FreshWorker(fctx, st.Worker)
	cancel()
	if err == nil {
		if err = n.Store.SetWorkerSync(w, above); err == nil {
			err = n.Gen.SwitchWorker(w, above, lease)
		}
	}
	if err != nil {
		why := "cannot take a fresh worker ID (" + err.Error() + "): waiting for the clock to catch up"
		switch {
		case errors.Is(err, cluster.ErrRefused):
			why = "no fresh worker ID is free (every one's last lease ends above this clock): waiting for the clock to catch up"
		case errors.Is(err, cluster.ErrNoLeader):
			why = "cannot reach the cluster's quorum for a fresh worker ID: waiting for the clock to catch up"
		}
		n.Gen.SetClockBackProblem(why)
		n.log.Warn("the clock went back past --max-borrow and no fresh worker ID could be taken: answering CLOCKBACK",
			"behind_ms", st.ClockBehindMS, "worker_id", st.Worker, "err", err)
		return err
	}
	n.Gen.SetLeaseProblem("") // the cluster just granted the new worker's lease
	n.log.Warn("the clock went back past --max-borrow: issuing on a fresh worker ID; the old one lapses at its lease end",
		"behind_ms", st.ClockBehindMS, "old_worker_id", st.Worker, "old_lease_end_ms", st.LeaseEndMS,
		"worker_id", w, "start_above_ms", above, "lease_end_ms", lease)
	return nil
}

// retiredHere reports whether the cluster holds w as a worker ID this
// node retired.
func (n *Node) retiredHere(w int64) bool {
	return slices.ContainsFunc(n.Cluster.Retired(), func(r cluster.RetiredWorker) bool { return r.Worker == w })
}
