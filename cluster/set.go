package cluster

// The SET protocol: ask every member, hold the tag's allocations, fence every
// member, bound what may have been issued, commit, and confirm.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"idserver/engine"
)

// Set sets tag to v, which may lower it below values reserved in buffers
// but never issued (docs/commands.md, SET). cond is "", "NX" (only if the tag
// does not exist) or "XX" (only if it exists), decided in the same Apply.
// It returns the tag's high-water before the SET and whether the tag
// existed; whether the SET applied follows from cond and existed. A SET
// below a value that may have been issued is engine.ErrWouldGoBack, naming
// the value and who may have issued it. A SET that applied answers only
// once every member has applied it; a member that does not confirm in
// time makes it ErrUnconfirmed, naming the member (a retry is safe).
func (c *Cluster) Set(ctx context.Context, tag string, v int64, cond string) (old int64, existed bool, err error) {
	switch cond {
	case "", "NX", "XX":
	default:
		return 0, false, fmt.Errorf("unknown SET condition %q", cond)
	}
	if !c.IsLeader() {
		resp, err := c.toLeader(ctx, &request{Op: opSet, Tag: tag, Value: v, Cond: cond})
		if resp == nil {
			return 0, false, err
		}
		return resp.Old, resp.Found, err
	}
	return c.setLocal(ctx, tag, v, cond)
}

// setLocal runs a SET on the leader:
//
//  0. Every member must answer with the largest value of the tag it handed
//     out, dropping nothing (else SET fails with nothing dropped).
//  1. Allocations of the tag wait on this leader until the SET ends (a
//     hold), so that the SET is not overtaken by refills forever.
//  2. It reads the tag's state at some rev.
//  3. It fences every member: each drops every buffered value of the tag
//     and every allocation in flight, and answers the largest value it
//     handed out in its process, or nothing it can vouch for (it keeps no
//     record of the tag: its buffer was dropped idle), which counts as
//     every value it was given. From then on a member hands out only
//     values allocated after the fence.
//  4. From the answers and what the state says each node was allocated, it
//     bounds what may have been issued; v below that is refused.
//  5. It commits the SET on condition that the tag is still at that rev:
//     an allocation committed after the read (say, by a leader before this
//     one, or queued before the hold) moves the rev, and the SET starts
//     over. One committed before the read is either in a member's answer
//     or dropped by its fence.
//
// A SET refused at step 0 drops nothing: a value a member answered, the
// state's bound of untracked nodes and what a node was given before it
// restarted are each also in step 4's bound (a process's largest issued
// value only grows, and a restart moves its values into Before), so a SET
// refused there would be refused at step 4 too, after every buffer of the
// tag was dropped. So is all that a member which vouches for nothing was
// given, unless it made a new buffer of the tag and issued from it between
// the two steps: a refusal then is early, never unsafe. What only the fence can tell (that a node which
// restarted since its last allocation issued nothing of it) is not used
// to refuse at step 0. A SET that fails later leaves dropped values
// behind: gaps, never repeats.
func (c *Cluster) setLocal(ctx context.Context, tag string, v int64, cond string) (int64, bool, error) {
	if err := c.caughtUp(); err != nil {
		return 0, false, err
	}
	// A member removed lately may still run, cut off, with values in its
	// buffers that no fence reaches: wait until it cannot hand them out.
	// This comes before the members are asked what they issued: asked
	// first, their answers would be as old as the wait (seconds, up to a
	// lease), and a SET that fell below what they issued meanwhile would
	// be refused only after the fence had dropped every buffer.
	if err := c.waitDeparted(ctx); err != nil {
		return 0, false, err
	}
	// A member out of reach would fail the fence, after every other member
	// dropped its buffers: ask them all first, and fail with nothing dropped
	// (a SET retried while a member is down then costs the others nothing).
	issued := map[string]int64{}
	var untracked []string // members whose answer vouches for nothing (issuedLocal)
	var mu sync.Mutex
	if err := c.everyMember(ctx, fmt.Sprintf("SET %s %d (nothing changed)", tag, v), "answered", &request{Op: opIssued, Tag: tag},
		func(node string, resp *response) {
			mu.Lock()
			issued[node] = resp.Value
			if resp.Boot == 0 {
				untracked = append(untracked, node)
			}
			mu.Unlock()
		},
		func(context.Context) (*response, error) { return c.issuedLocal(tag), nil }); err != nil {
		return 0, false, err
	}
	release, err := c.hold(ctx, tag)
	if err != nil {
		return 0, false, noLeader(ErrNotApplied, "%v", err)
	}
	defer release()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		t, existed := c.fsm.tagState(tag)
		if (cond == "NX" && existed) || (cond == "XX" && !existed) {
			return t.high(), existed, nil // a SET whose condition fails changes nothing, buffers included
		}
		if bound, who := t.issuedBefore(issued); bound > v && attempt == 1 {
			return t.high(), existed, fmt.Errorf("%w: %s: %s", engine.ErrWouldGoBack, tag, who) // nothing dropped
		}
		if bound, who := untrackedBound(t, untracked); bound > v && attempt == 1 {
			return t.high(), existed, fmt.Errorf("%w: %s: %s", engine.ErrWouldGoBack, tag, who) // nothing dropped
		}
		answers, err := c.fence(ctx, tag, fmt.Sprintf("SET %s %d (nothing committed)", tag, v))
		if err != nil {
			return t.high(), existed, err
		}
		if bound, who := t.issuedBound(answers); bound > v {
			return t.high(), existed, fmt.Errorf("%w: %s: %s", engine.ErrWouldGoBack, tag, who)
		}
		e := newEntry(entrySet).string(tag).varint(v).uvarint(uint64(setConds[cond])).uvarint(t.Rev)
		resp, index, err := c.applyIndex(e)
		if err != nil {
			return 0, false, err
		}
		res, err := applyAnswer[setResult](resp, "SET")
		if err != nil {
			return 0, false, err
		}
		if errors.Is(res.Err, errMoved) {
			if attempt < attempts {
				continue
			}
			return res.Old, res.Existed, fmt.Errorf("%w: SET %s %d: allocations of %s moved it %d times while it was checked (nothing committed); retrying it is safe",
				ErrUnconfirmed, tag, v, tag, attempts)
		}
		if res.Err != nil || (cond == "NX" && res.Existed) || (cond == "XX" && !res.Existed) {
			return res.Old, res.Existed, res.Err
		}
		return res.Old, res.Existed, c.confirm(ctx, index, fmt.Sprintf("SET %s %d (committed)", tag, v))
	}
}

// untrackedBound is the most that members which vouch for nothing
// (issuedLocal) were given of t, all of which they may have issued, and
// who was given it.
func untrackedBound(t tagState, untracked []string) (bound int64, who string) {
	for _, node := range untracked {
		if last := t.Nodes[node].Last; last > bound {
			bound, who = last, fmt.Sprintf("node %s was given values up to %d and keeps no record of which it issued (it restarted, or dropped its idle buffer of the tag), so it may have issued them", node, last)
		}
	}
	return bound, who
}

// hold makes allocations of tag on this leader wait until release is
// called; it waits for another SET's hold on tag first.
func (c *Cluster) hold(ctx context.Context, tag string) (release func(), err error) {
	for {
		c.holdMu.Lock()
		ch, held := c.holds[tag]
		if !held {
			ch = make(chan struct{})
			c.holds[tag] = ch
			c.holdMu.Unlock()
			return func() {
				c.holdMu.Lock()
				delete(c.holds, tag)
				c.holdMu.Unlock()
				close(ch)
			}, nil
		}
		c.holdMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// waitHold returns once no SET holds tag on this leader, or after d.
func (c *Cluster) waitHold(ctx context.Context, tag string, d time.Duration) {
	c.holdMu.Lock()
	ch, held := c.holds[tag]
	c.holdMu.Unlock()
	if !held {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}

// fence runs OnFence for tag on every member and collects the answers.
func (c *Cluster) fence(ctx context.Context, tag, what string) (map[string]fenced, error) {
	answers := map[string]fenced{}
	var mu sync.Mutex
	err := c.everyMember(ctx, what, "dropped its buffered values", &request{Op: opFence, Tag: tag},
		func(node string, resp *response) {
			mu.Lock()
			answers[node] = fenced{Issued: resp.Value, Boot: resp.Boot}
			mu.Unlock()
		},
		func(context.Context) (*response, error) { return c.fenceLocal(tag), nil })
	return answers, err
}

// issuedLocal answers what this node handed out of tag, dropping nothing.
// An answer of 0 vouches for nothing (the node keeps no record of the tag:
// engine.Segments.Issued), so it goes without this process's boot: the
// leader then counts every value the state says this node was allocated of
// the tag as possibly issued, as it does for a node that restarted.
func (c *Cluster) issuedLocal(tag string) *response {
	r := &response{}
	if c.cfg.OnIssued != nil {
		r.Value = c.cfg.OnIssued(tag)
	}
	if r.Value != 0 {
		r.Boot = c.boot
	}
	return r
}

// fenceLocal drops what this node buffers of tag and answers as
// issuedLocal does.
func (c *Cluster) fenceLocal(tag string) *response {
	r := &response{}
	if c.cfg.OnFence != nil {
		r.Value = c.cfg.OnFence(tag)
	}
	if r.Value != 0 {
		r.Boot = c.boot
	}
	return r
}

// confirm waits until every member has published index: applied it and
// dropped what it makes stale from its buffers.
func (c *Cluster) confirm(ctx context.Context, index uint64, what string) error {
	// Followers learn that index committed from the leader's next
	// AppendEntries, which without new entries is the next heartbeat (a
	// tenth of the heartbeat timeout: 100 ms by default). A barrier is a new
	// entry: replicating it tells them now. Its own outcome does not matter.
	c.raft.Barrier(c.timing.Apply)
	return c.everyMember(ctx, what, "applied it", &request{Op: opApplied, Index: index}, nil,
		func(ctx context.Context) (*response, error) { return nil, c.fsm.waitPublished(ctx, index) })
}

// everyMember sends req to every other member, and runs local for this
// node, all within Timing.Confirm, handing each answer to got (when not
// nil). A member that does not answer makes it ErrUnconfirmed, naming the
// member.
func (c *Cluster) everyMember(ctx context.Context, what, done string, req *request,
	got func(node string, resp *response), local func(context.Context) (*response, error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.timing.Confirm)
	defer cancel()
	members := *c.fsm.members.Load()
	errs := make(chan error, len(members))
	for id, m := range members {
		go func() {
			var resp *response
			var err error
			if id == c.cfg.NodeID {
				resp, err = local(ctx)
			} else {
				r := *req
				if resp, err = c.call(ctx, m.RaftAddr, &r); err != nil {
					err = fmt.Errorf("node %s (%s): %v", id, m.RESPAddr, err)
				}
			}
			if err == nil && got != nil {
				got(id, resp)
			}
			errs <- err
		}()
	}
	var failed []string
	for range members {
		if err := <-errs; err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s: within %v not every member %s: %s; the command is idempotent, retrying it is safe",
			ErrUnconfirmed, what, c.timing.Confirm, done, strings.Join(failed, "; "))
	}
	return nil
}
