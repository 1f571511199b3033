package cluster

// Fresh worker IDs: a node whose wall clock went back further than
// --max-borrow (docs/guarantees.md, promise 3) does not wait for the clock to catch up
// with the IDs it issued: it takes another worker ID, one whose previous
// lease ended below its clock, and issues on it from the wall clock on.
// Its old worker ID is retired: still held by the node (the member
// record's Retired), its lease no longer renewed, and it returns to the
// pool once a fresh-worker entry applies at a time above its lease end.
// Every ID issued on it lies below that end, and a worker ID is handed out
// again only above its previous lease end, so nothing repeats.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"idserver/persist"
)

// FreshWorker asks the cluster for a fresh worker ID for this node, which
// issues on from: one whose previous lease ended below this node's clock.
// It returns the worker ID, the ID time to start above (its previous
// lease end, below the clock) and its first lease end. The cluster retires
// from (and the worker this node held, if it is not from: a retry after a
// lost answer): they return to the pool above their lease ends. With no
// worker ID free below the clock it fails with ErrRefused, and the node
// keeps its worker ID.
func (c *Cluster) FreshWorker(ctx context.Context, from int64) (worker, startAboveMS, leaseEndMS int64, err error) {
	if !c.IsLeader() {
		resp, err := c.toLeader(ctx, &request{Op: opFresh, Node: c.cfg.NodeID, Worker: from, Value: c.nowMS()})
		switch {
		case err != nil:
			return 0, 0, 0, err
		case resp.Join == nil:
			return 0, 0, 0, noLeader(ErrNotApplied, "the leader's answer to a fresh worker ID has no result")
		}
		return resp.Join.Worker, resp.Join.StartAboveMS, resp.Join.LeaseEndMS, nil
	}
	jr, err := c.freshLocal(c.cfg.NodeID, from, c.nowMS())
	return jr.Worker, jr.StartAboveMS, jr.LeaseEndMS, err
}

// freshLocal commits entryFresh on this node, the leader. nowMS is the
// asking node's clock: the worker must start below it.
func (c *Cluster) freshLocal(node string, from, nowMS int64) (JoinResult, error) {
	resp, err := c.apply(newEntry(entryFresh).string(node).varint(from).varint(nowMS).varint(c.cfg.WorkerLease.Milliseconds()))
	if err != nil {
		return JoinResult{}, err
	}
	jr := resp.(joinResult)
	if jr.Err != nil {
		return JoinResult{}, jr.Err
	}
	c.log.Warn("fresh worker ID for a clock that went back", "node", node, "from", from, "worker", jr.Worker,
		"start_above_ms", jr.StartAboveMS, "lease_end_ms", jr.LeaseEndMS)
	return JoinResult{Worker: jr.Worker, StartAboveMS: jr.StartAboveMS, LeaseEndMS: jr.LeaseEndMS}, nil
}

// answerFresh is the leader's side of opFresh.
func (c *Cluster) answerFresh(req *request) *response {
	jr, err := c.freshLocal(req.Node, req.Worker, req.Value)
	if err != nil {
		return &response{wireError: wireErrorOf(err)}
	}
	return &response{Join: &jr}
}

func (f *fsm) applyFresh(d *decoder, b *persist.Batch, ch *changes) any {
	node, from, nowMS, leaseMS := d.string(), d.varint(), d.varint(), d.varint()
	d.end()
	m, ok := f.meta.Members[node]
	switch {
	case !ok:
		return joinResult{Err: fmt.Errorf("%w: node %q is not a member of the cluster (forgotten?)", ErrNotMember, node)}
	case m.Worker != from && !slices.Contains(m.Retired, from):
		return joinResult{Err: fmt.Errorf("%w: node %q does not hold worker ID %d", ErrNotMember, node, from)}
	}
	f.releaseLapsed(nowMS)
	// The lowest worker ID in the pool (never used, or let go) whose
	// previous lease ended below the node's clock: the node starts on it
	// at once, not ahead of its clock.
	for w := int64(0); w <= f.maxWorker; w++ {
		ws := f.meta.Workers[w]
		if (ws != nil && (!ws.Forgotten || ws.LeaseEnd >= nowMS)) || f.isReserved(w) {
			continue
		}
		res := joinResult{Worker: w}
		if ws != nil {
			res.StartAboveMS = ws.LeaseEnd
		}
		res.LeaseEndMS = nowMS + leaseMS
		// The held worker is retired, not let go: its lease runs out
		// unrenewed. Retired is replaced, never edited in place: the
		// published copy of the member shares it.
		retired := slices.Clone(m.Retired)
		if !slices.Contains(retired, m.Worker) {
			retired = append(retired, m.Worker)
		}
		sort.Slice(retired, func(i, j int) bool { return retired[i] < retired[j] })
		m.Retired = retired
		m.Worker = w
		f.meta.Workers[w] = &workerState{Node: node, LeaseEnd: res.LeaseEndMS}
		ch.members = true
		return res
	}
	return joinResult{Err: fmt.Errorf("%w: no fresh worker ID: none of the %d%s is free with its last lease ended below the clock (%d ms since the epoch)",
		ErrRefused, f.assignable(), f.reservedNote(), nowMS)}
}

// releaseLapsed lets go of every retired worker ID whose lease ended below
// nowMS: it returns to the pool, free above its lease end. The caller
// holds the lock.
func (f *fsm) releaseLapsed(nowMS int64) {
	for _, m := range f.meta.Members {
		var keep []int64
		for _, w := range m.Retired {
			if ws := f.meta.Workers[w]; ws != nil && ws.LeaseEnd < nowMS {
				ws.Forgotten = true
				continue
			}
			keep = append(keep, w)
		}
		if len(keep) != len(m.Retired) {
			m.Retired = keep
		}
	}
}

// forgetRetired lets go of a member's retired worker IDs when the member
// goes (FORGET, or a --recover that drops it): free above their lease
// ends, as its current one is. A departed node's lease end (which a SET
// waits for) is raised to theirs: its buffered segment values run to the
// latest lease it was granted, on any of its workers. The caller holds the
// lock.
func (f *fsm) forgetRetired(node string, m *member) {
	for _, w := range m.Retired {
		if ws := f.meta.Workers[w]; ws != nil {
			ws.Forgotten = true
			if end, ok := f.meta.Departed[node]; ok && ws.Node == node && ws.LeaseEnd > end {
				f.meta.Departed[node] = ws.LeaseEnd
			}
		}
	}
}

// RetiredWorker is a worker ID a node issued on before its clock went back
// and it took a fresh one: held until its lease (never renewed again)
// ends.
type RetiredWorker struct {
	Worker     int64
	LeaseEndMS int64
}

// retired is node's retired worker IDs with their lease ends.
func (f *fsm) retired(node string) []RetiredWorker {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.meta.Members[node]
	if !ok {
		return nil
	}
	var out []RetiredWorker
	for _, w := range m.Retired {
		if ws := f.meta.Workers[w]; ws != nil {
			out = append(out, RetiredWorker{Worker: w, LeaseEndMS: ws.LeaseEnd})
		}
	}
	return out
}

// Retired is this node's retired worker IDs, as its state machine has them.
func (c *Cluster) Retired() []RetiredWorker { return c.fsm.retired(c.cfg.NodeID) }

// retiredPairs renders the retired worker IDs for CLUSTER INFO: "none", or
// worker@lease-end-ms, comma-separated.
func retiredPairs(r []RetiredWorker) string {
	if len(r) == 0 {
		return "none"
	}
	s := make([]string, len(r))
	for i, w := range r {
		s[i] = fmt.Sprintf("%d@%d", w.Worker, w.LeaseEndMS)
	}
	return strings.Join(s, ",")
}
