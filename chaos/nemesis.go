package chaos

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fault kinds.
const (
	FKill         = "kill"               // kill -9, restart on the same directory and flags
	FPause        = "pause"              // SIGSTOP, then SIGCONT
	FIsolate      = "partition-isolate"  // a node cut off from all others, both ways
	FOneWay       = "partition-oneway"   // a node cannot send to another
	FClockBack    = "clock-back"         // DEBUG CLOCK -1ms..-1h, then back to 0
	FClockForward = "clock-forward"      // DEBUG CLOCK +1ms..+5s, then back to 0
	FClockStrobe  = "clock-strobe"       // DEBUG CLOCK jumping within ±500ms every few ms
	FForgetLive   = "forget-live"        // CLUSTER FORGET of a running node; a replacement joins while it runs on
	FWipeNewID    = "wipe-rejoin-new-id" // kill, FORGET, wiped directory rejoins under a new node ID
	FWipeSameID   = "wipe-rejoin-same-id"
	FWrongLayout  = "join-wrong-layout" // a joiner with --worker-bits 9 --seq-bits 13
	FDiskFull     = "disk-full"         // a member's disk filled, then emptied
	FPowerCut     = "power-cut"         // a node's power cut: killed, its unsynced writes dropped (lazyfs), restarted
	FPowerCutAll  = "power-cut-all"     // the whole cluster's power cut at one instant
)

// AllFaults lists every fault kind, in the order tables print them.
var AllFaults = []string{FKill, FPause, FIsolate, FOneWay, FClockBack, FClockForward, FClockStrobe, FForgetLive, FWipeNewID, FWipeSameID, FWrongLayout, FDiskFull, FPowerCut, FPowerCutAll}

var partitionFaults = []string{FIsolate, FOneWay}
var clockFaults = []string{FClockBack, FClockForward, FClockStrobe}
var powerFaults = []string{FPowerCut, FPowerCutAll}

// Fault is one scheduled fault. Target -1 means whichever node leads when
// the fault starts.
type Fault struct {
	Kind   string
	Gap    time.Duration // quiet time before it
	Hold   time.Duration
	Target int
	Other  int // the second node of a one-way partition
	Amount time.Duration
	// ForgetAfter: a wipe's old node ID is forgotten after its
	// replacement joined, not before (an operator may do either).
	ForgetAfter bool
}

func (f Fault) String() string {
	t := "leader"
	if f.Target >= 0 {
		t = "slot" + strconv.Itoa(f.Target)
	}
	s := fmt.Sprintf("+%v %s %s hold=%v amount=%v", f.Gap.Round(time.Millisecond), f.Kind, t, f.Hold.Round(time.Millisecond), f.Amount)
	if f.ForgetAfter {
		s += " forget-after"
	}
	return s
}

// weights make membership faults rarer than the cheap ones.
var weights = map[string]int{FKill: 6, FPause: 5, FIsolate: 5, FOneWay: 4, FClockBack: 5, FClockForward: 2, FClockStrobe: 2,
	FForgetLive: 2, FWipeNewID: 1, FWipeSameID: 1, FWrongLayout: 1, FDiskFull: 2,
	FPowerCut: 4, FPowerCutAll: 2}

// Schedule draws the faults of a campaign of the given length from seed.
func Schedule(seed uint64, d time.Duration, kinds []string, nodes int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0xfa017))
	total := 0
	for _, k := range kinds {
		total += weights[k]
	}
	var out []Fault
	if total == 0 {
		return nil
	}
	for t := time.Duration(0); ; {
		f := Fault{Gap: time.Duration(200+rng.IntN(1800)) * time.Millisecond, Target: -1, Other: -1}
		w := rng.IntN(total)
		for _, k := range kinds {
			if w -= weights[k]; w < 0 {
				f.Kind = k
				break
			}
		}
		if rng.IntN(5) >= 2 {
			f.Target = rng.IntN(nodes)
		}
		f.Other = rng.IntN(nodes)
		f.Hold = time.Duration(300+rng.IntN(3700)) * time.Millisecond
		switch f.Kind {
		case FKill, FPowerCut, FPowerCutAll:
			f.Hold = time.Duration(rng.IntN(2000)) * time.Millisecond
		case FClockBack:
			// 1 ms .. 1 h, log-uniform.
			f.Amount = time.Duration(math.Exp(rng.Float64()*math.Log(3.6e6))) * time.Millisecond
		case FClockForward:
			f.Amount = time.Duration(1+rng.IntN(5000)) * time.Millisecond
		case FClockStrobe:
			f.Amount = time.Duration(1+rng.IntN(500)) * time.Millisecond
		case FForgetLive:
			f.Hold = time.Duration(2000+rng.IntN(13000)) * time.Millisecond
		case FWipeNewID, FWipeSameID:
			f.ForgetAfter = rng.IntN(2) == 0
		}
		t += f.Gap + f.Hold
		if t > d {
			return out
		}
		out = append(out, f)
	}
}

// nemesis injects the scheduled faults into a running cluster.
type nemesis struct {
	c    *campaign
	rng  *rand.Rand // for choices made at run time (strobe offsets)
	seq  int        // replacement node IDs
	done int        // faults injected
}

func (nm *nemesis) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// run injects the schedule until ctx ends or the schedule does.
func (nm *nemesis) run(ctx context.Context, faults []Fault) {
	for _, f := range faults {
		nm.sleep(ctx, f.Gap)
		if ctx.Err() != nil {
			return
		}
		nm.repair()
		nm.inject(ctx, f)
	}
}

// leader is the slot whose node leads now, or a random live slot.
func (nm *nemesis) leader() int {
	c := nm.c
	for _, n := range c.pm.slots() {
		p := n.running()
		if p == nil {
			continue
		}
		r, err := admin(p.addr, time.Second, "CLUSTER", "LEADER")
		if err != nil || r.null || r.isError() {
			continue
		}
		for _, m := range c.pm.slots() {
			if m.respAddr() == r.str {
				return m.slot
			}
		}
	}
	return nm.rng.IntN(len(c.pm.slots()))
}

// liveOther is a running slot other than slot, or -1.
func (nm *nemesis) liveOther(slot int) int {
	for _, n := range nm.c.pm.slots() {
		if n.slot != slot && n.running() != nil {
			return n.slot
		}
	}
	return -1
}

func (nm *nemesis) inject(ctx context.Context, f Fault) {
	c := nm.c
	target := f.Target
	if target < 0 {
		target = nm.leader()
	}
	n := c.pm.node(target)
	for _, m := range c.pm.slots() {
		c.pm.reap(m)
	}
	ev := &FaultEvent{Kind: f.Kind, Slots: []int{target}, Start: c.since()}
	defer func() {
		ev.End = c.since()
		c.hist.addFault(ev)
		c.logf("fault %s", ev)
		nm.done++
	}()
	switch f.Kind {
	case FKill:
		n.kill()
		ev.Detail = "kill -9 " + n.nodeID
		nm.sleep(ctx, f.Hold)
		if _, err := c.pm.start(n, n.join, 30*time.Second); err != nil {
			ev.Detail += "; restart failed: " + err.Error()
		}
	case FPause:
		if err := n.signal(syscall.SIGSTOP); err != nil {
			ev.Detail = err.Error()
			return
		}
		ev.Detail = "SIGSTOP " + n.nodeID
		nm.sleep(ctx, f.Hold)
		n.signal(syscall.SIGCONT)
	case FIsolate, FOneWay:
		if c.fw == nil {
			return
		}
		var cuts [][2]*node
		if f.Kind == FIsolate {
			for _, m := range c.pm.slots() {
				if m != n {
					cuts = append(cuts, [2]*node{n, m}, [2]*node{m, n})
				}
			}
		} else {
			other := f.Other
			if other == target {
				other = (other + 1) % len(c.pm.slots())
			}
			cuts = append(cuts, [2]*node{n, c.pm.node(other)})
			ev.Slots = append(ev.Slots, other)
		}
		var what []string
		for _, cut := range cuts {
			if err := c.fw.cut(cut[0].uid, cut[1].host); err != nil {
				ev.Detail = err.Error()
				c.fw.heal()
				return
			}
			what = append(what, fmt.Sprintf("%s->%s", cut[0].nodeID, cut[1].nodeID))
		}
		ev.Detail = "cut " + strings.Join(what, " ")
		nm.sleep(ctx, f.Hold)
		if err := c.fw.heal(); err != nil {
			ev.Detail += "; heal: " + err.Error()
		}
	case FClockBack, FClockForward:
		d := f.Amount
		if f.Kind == FClockBack {
			d = -d
		}
		ev.Detail = fmt.Sprintf("DEBUG CLOCK %d on %s", d.Milliseconds(), n.nodeID)
		if err := c.setClock(n, d); err != nil {
			ev.Detail += ": " + err.Error()
			return
		}
		nm.sleep(ctx, f.Hold)
		c.setClock(n, 0)
	case FClockStrobe:
		ev.Detail = fmt.Sprintf("DEBUG CLOCK within ±%v on %s", f.Amount, n.nodeID)
		steps := 0
		for end := time.Now().Add(f.Hold); time.Now().Before(end) && ctx.Err() == nil; steps++ {
			d := time.Duration(nm.rng.Int64N(2*int64(f.Amount)+1)) - f.Amount
			if err := c.setClock(n, d.Truncate(time.Millisecond)); err != nil {
				ev.Detail += ": " + err.Error()
				break
			}
			time.Sleep(time.Duration(2+nm.rng.IntN(8)) * time.Millisecond)
		}
		c.setClock(n, 0)
		ev.Detail += fmt.Sprintf(", %d steps", steps)
	case FDiskFull:
		disk, ok := c.pm.disks[n.slot]
		if !ok {
			ev.Detail = "no tmpfs for this slot"
			return
		}
		path, size, err := fillDisk(disk)
		ev.Detail = fmt.Sprintf("filled %s's disk with %d MiB", n.nodeID, size>>20)
		if err != nil {
			ev.Detail += ": " + err.Error()
		}
		nm.sleep(ctx, f.Hold)
		os.Remove(path)
	case FPowerCut:
		nm.powerCut(ctx, []*node{n}, f, ev)
	case FPowerCutAll:
		ev.Slots = nil
		for _, m := range c.pm.slots() {
			ev.Slots = append(ev.Slots, m.slot)
		}
		nm.powerCut(ctx, c.pm.slots(), f, ev)
	case FForgetLive:
		nm.forgetLive(ctx, n, f, ev)
	case FWipeNewID:
		nm.wipeRejoin(n, false, f.ForgetAfter, ev)
	case FWipeSameID:
		nm.wipeRejoin(n, true, f.ForgetAfter, ev)
	case FWrongLayout:
		nm.wrongLayout(ctx, f, ev)
	}
}

// powerCut cuts the power of nodes at one instant: their disks (lazyfs)
// freeze, so nothing more reaches them, the processes are SIGKILLed and
// waited for, everything the disks hold unsynced is dropped, and after the
// hold all restart at once on the same directories and flags.
func (nm *nemesis) powerCut(ctx context.Context, nodes []*node, f Fault, ev *FaultEvent) {
	c := nm.c
	var ids []string
	for _, n := range nodes {
		if c.pm.lazy[n.slot] == nil {
			ev.Detail = "no lazyfs disk for slot " + strconv.Itoa(n.slot)
			return
		}
		ids = append(ids, n.nodeID)
	}
	for _, n := range nodes {
		c.pm.lazy[n.slot].Freeze()
	}
	var procs []*proc
	for _, n := range nodes {
		if p := n.running(); p != nil {
			p.killed.Store(true)
			p.cmd.Process.Signal(syscall.SIGKILL)
			procs = append(procs, p)
		}
	}
	for _, p := range procs {
		<-p.done
	}
	for _, n := range nodes {
		n.setRunning(nil)
	}
	pages, dirs := 0, 0
	for _, n := range nodes {
		st := c.pm.lazy[n.slot].Cut()
		pages += st.Pages
		dirs += st.Dirs
	}
	c.hist.addPowerCut(pages)
	ev.Detail = fmt.Sprintf("power cut on %s: %d unsynced pages (4 KiB) and %d directories' unsynced names dropped", strings.Join(ids, ","), pages, dirs)
	nm.sleep(ctx, f.Hold)
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { _, errs[i] = c.pm.start(n, n.join, 40*time.Second) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			ev.Detail += "; restart failed: " + err.Error()
		}
	}
}

// forget sends CLUSTER FORGET nodeID to a running member other than slot.
func (nm *nemesis) forget(slot int, nodeID string) error {
	other := nm.liveOther(slot)
	if other < 0 {
		return fmt.Errorf("no other member running")
	}
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		var r reply
		if r, err = admin(nm.c.pm.node(other).respAddr(), 5*time.Second, "CLUSTER", "FORGET", nodeID); err == nil {
			if !r.isError() {
				return nil
			}
			if err = fmt.Errorf("%s", r.str); !strings.HasPrefix(r.str, "TRYAGAIN") {
				return err // refused: asking again changes nothing
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return err
}

func (nm *nemesis) newNodeID(slot int) string {
	nm.seq++
	return fmt.Sprintf("n%d-r%d", slot, nm.seq)
}

// forgetLive forgets a running node, starts its replacement (new node ID,
// new directory and ports) while it runs on, keeps a client on the
// forgotten one for the hold, then kills it.
func (nm *nemesis) forgetLive(ctx context.Context, n *node, f Fault, ev *FaultEvent) {
	c := nm.c
	ghost := n.running()
	if ghost == nil {
		ev.Detail = "target not running"
		return
	}
	if err := nm.forget(n.slot, n.nodeID); err != nil {
		ev.Detail = "FORGET " + n.nodeID + " refused: " + err.Error()
		return
	}
	ev.Detail = "FORGET " + n.nodeID + " while it runs"
	gctx, stopGhost := context.WithCancel(ctx)
	ghostDone := make(chan struct{})
	go func() {
		defer close(ghostDone)
		c.ghostClient(gctx, n.slot, ghost, "forgotten")
	}()
	repl := &node{slot: n.slot, host: n.host, uid: n.uid}
	other := nm.liveOther(n.slot)
	if other < 0 {
		ev.Detail += "; no member left to join"
	} else if err := c.pm.freshDir(repl, nm.newNodeID(n.slot)); err != nil {
		ev.Detail += "; " + err.Error()
	} else {
		repl.join = c.pm.node(other).respAddr()
		c.pm.setNode(n.slot, repl)
		if _, err := c.pm.start(repl, repl.join, 40*time.Second); err != nil {
			ev.Detail += "; replacement failed: " + err.Error()
		} else {
			ev.Detail += "; replacement " + repl.nodeID + " joined"
		}
	}
	nm.sleep(ctx, f.Hold)
	stopGhost()
	<-ghostDone
	n.kill()
	// Its disk goes with it: left behind, the directories of forgotten
	// nodes fill the slot's small tmpfs after a few dozen replacements,
	// and a later member cannot append to its Raft log.
	os.RemoveAll(n.dir)
}

// wipeRejoin kills a node and starts it on an empty directory with --join:
// under a new node ID with a FORGET of the old one, before or after the
// rejoin (the operator's remedy), or under the same node ID without FORGET
// (a replaced disk), which the spec says is refused.
func (nm *nemesis) wipeRejoin(n *node, sameID, forgetAfter bool, ev *FaultEvent) {
	c := nm.c
	defer func() { ev.Detail = strings.TrimSuffix(ev.Detail, "; ") }()
	other := nm.liveOther(n.slot)
	if other < 0 {
		ev.Detail = "no other member running"
		return
	}
	n.kill()
	join := c.pm.node(other).respAddr()
	if sameID {
		if err := c.pm.freshDir(n, n.nodeID); err != nil {
			ev.Detail = err.Error()
			return
		}
		n.join = join
		p, err := c.pm.start(n, join, 20*time.Second)
		if err == nil {
			ev.Detail = "empty directory under member ID " + n.nodeID + " accepted"
			c.hist.addMembership(Anomaly{At: c.since(), Kind: "membership", Msg: fmt.Sprintf("%s restarted on an empty directory under its member node ID and joined (the spec says: refused, remedy FORGET or a new --node-id); log %s", n.nodeID, p.logf)})
			return
		}
		ev.Detail = "empty directory under " + n.nodeID + " refused (" + firstLine(err.Error()) + "); "
		n.kill()
	}
	old := n.nodeID
	forget := func() {
		if err := nm.forget(n.slot, old); err != nil {
			ev.Detail += "FORGET " + old + ": " + err.Error() + "; "
		} else {
			ev.Detail += "FORGET " + old + "; "
		}
	}
	if !forgetAfter {
		forget()
	}
	defer func() {
		if forgetAfter {
			forget()
		}
	}()
	if err := c.pm.freshDir(n, nm.newNodeID(n.slot)); err != nil {
		ev.Detail += err.Error() + "; "
		return
	}
	n.join = join
	if _, err := c.pm.start(n, join, 40*time.Second); err != nil {
		ev.Detail += "rejoin as " + n.nodeID + " failed: " + err.Error() + "; "
		return
	}
	ev.Detail += "rejoined as " + n.nodeID + "; "
}

// KRepair is the fault-table kind of the repairs the nemesis makes, as a
// careful operator would, before each fault and at the heal.
const KRepair = "operator-repair"

// repair brings the cluster back to full strength, as a careful operator
// does before touching it again: every slot runs (a slot whose restart is
// refused, say a joiner killed before it stored its worker ID, gets the
// remedy: FORGET, an empty directory, a new node ID), and the members are
// the slots' nodes and nobody else (an old node ID a failed FORGET left
// behind is forgotten). So each fault starts from three voters, and takes at
// most one away for its hold: the majority of the configured voters is
// never lost for longer than one fault.
func (nm *nemesis) repair() []string {
	c := nm.c
	ev := &FaultEvent{Kind: KRepair, Start: c.since()}
	var did, problems []string
	for _, n := range c.pm.slots() {
		c.pm.reap(n)
	}
	for _, n := range c.pm.slots() {
		if n.running() != nil {
			continue
		}
		ev.Slots = append(ev.Slots, n.slot)
		if other := nm.liveOther(n.slot); n.join != "" && other >= 0 {
			// The member it first joined through may have moved.
			n.join = c.pm.node(other).respAddr()
		}
		p, err := c.pm.start(n, n.join, 40*time.Second)
		if err == nil {
			did = append(did, "restarted "+n.nodeID)
			continue
		}
		if p == nil || !p.exited() {
			problems = append(problems, err.Error())
			continue // slow, not refused: it may still come up
		}
		// Refused: the remedy.
		old := n.nodeID
		other := nm.liveOther(n.slot)
		if other < 0 {
			problems = append(problems, fmt.Sprintf("%s refused to start (%s) and no member runs", old, firstLine(err.Error())))
			continue
		}
		if err := nm.forget(n.slot, old); err != nil {
			problems = append(problems, "FORGET "+old+": "+err.Error())
		}
		if err := c.pm.freshDir(n, nm.newNodeID(n.slot)); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		n.join = c.pm.node(other).respAddr()
		if _, err := c.pm.start(n, n.join, 40*time.Second); err != nil {
			problems = append(problems, "rejoin as "+n.nodeID+": "+err.Error())
			continue
		}
		did = append(did, fmt.Sprintf("%s refused to start (%s): forgotten, rejoined as %s", old, firstLine(err.Error()), n.nodeID))
	}
	// A joiner is a non-voter until it has caught up: the next fault
	// waits for it, or the cluster would have a voter fewer than it shows.
	for _, n := range c.pm.slots() {
		if n.running() == nil || c.isVoter(n) {
			continue
		}
		waited := time.Now()
		if err := c.waitVoter(n, 30*time.Second); err != nil {
			problems = append(problems, err.Error())
		} else {
			did = append(did, fmt.Sprintf("waited %v for %s to be promoted to voter", time.Since(waited).Round(time.Millisecond), n.nodeID))
		}
	}
	stale, err := nm.staleMembers()
	if err != nil {
		problems = append(problems, "member list: "+err.Error())
	}
	for _, id := range stale {
		if err := nm.forget(-1, id); err != nil {
			problems = append(problems, "FORGET stale member "+id+": "+err.Error())
		} else {
			did = append(did, "forgot stale member "+id)
		}
	}
	if len(did)+len(problems) > 0 {
		ev.End = c.since()
		ev.Detail = strings.Join(append(did, problems...), "; ")
		c.hist.addFault(ev)
		c.logf("fault %s", ev)
	}
	return problems
}

// staleMembers are the members, as the leader lists them, that no slot's
// node is.
func (nm *nemesis) staleMembers() ([]string, error) {
	c := nm.c
	var info map[string]string
	for deadline := time.Now().Add(10 * time.Second); info == nil; time.Sleep(200 * time.Millisecond) {
		for _, n := range c.pm.slots() {
			if p := n.running(); p != nil {
				if i, err := clusterInfo(p.addr); err == nil && i["role"] == "Leader" {
					info = i
					break
				}
			}
		}
		if info == nil && time.Now().After(deadline) {
			return nil, fmt.Errorf("no node leads (10 s)")
		}
	}
	current := map[string]bool{}
	for _, n := range c.pm.slots() {
		current[n.nodeID] = true
	}
	var stale []string
	for _, m := range strings.Split(info["member_list"], ",") {
		if id, _, ok := strings.Cut(m, "="); ok && !current[id] {
			stale = append(stale, id)
		}
	}
	return stale, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// wrongLayout starts a joiner with another layout. It must be refused; if
// it is accepted, a client issues on it for the hold (its IDs go into the
// history) before it is forgotten and killed.
func (nm *nemesis) wrongLayout(ctx context.Context, f Fault, ev *FaultEvent) {
	c := nm.c
	other := nm.liveOther(-1)
	if other < 0 {
		ev.Detail = "no member running"
		return
	}
	extra := &node{slot: len(c.pm.slots()), host: c.hostFor(len(c.pm.slots())), uid: c.uidFor(len(c.pm.slots()))}
	if err := c.pm.freshDir(extra, nm.newNodeID(extra.slot)); err != nil {
		ev.Detail = err.Error()
		return
	}
	extra.layout = []string{"--worker-bits", "9", "--seq-bits", "13"}
	ev.Slots = []int{extra.slot}
	p, err := c.pm.start(extra, c.pm.node(other).respAddr(), 20*time.Second)
	defer func() {
		extra.kill()
		os.RemoveAll(extra.dir)
	}()
	if err != nil {
		ev.Detail = "joiner with --worker-bits 9 --seq-bits 13 refused: " + firstLine(err.Error())
		return
	}
	worker := "?"
	if m := regexp.MustCompile(`msg=listening .* worker_id=(\d+)`).FindStringSubmatch(tailLog(p.logf, 50)); m != nil {
		worker = m[1]
	}
	ev.Detail = fmt.Sprintf("joiner with --worker-bits 9 --seq-bits 13 accepted as worker %s", worker)
	c.hist.addMembership(Anomaly{At: c.since(), Kind: "membership", Msg: fmt.Sprintf("a joiner with another layout (--worker-bits 9 --seq-bits 13) was accepted as %s, worker %s; log %s", extra.nodeID, worker, p.logf)})
	gctx, cancel := context.WithTimeout(ctx, f.Hold)
	c.ghostClient(gctx, extra.slot, p, "wrong-layout")
	cancel()
	if err := nm.forget(extra.slot, extra.nodeID); err != nil {
		ev.Detail += "; FORGET failed: " + err.Error()
	}
}

// heal ends every fault: partitions removed, paused processes continued,
// clocks set back to 0, stopped slots started.
func (nm *nemesis) heal() []string {
	c := nm.c
	var problems []string
	if c.fw != nil {
		if err := c.fw.heal(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, disk := range c.pm.disks {
		os.Remove(filepath.Join(disk, "filler"))
	}
	for _, n := range c.pm.slots() {
		c.pm.reap(n)
		n.signal(syscall.SIGCONT)
	}
	for _, n := range c.pm.slots() {
		if n.running() != nil && n.clockOffset() != 0 {
			c.setClock(n, 0)
		}
	}
	return append(problems, nm.repair()...)
}

// sortedKinds orders a count map by AllFaults.
func sortedKinds(m map[string]int) []string {
	var out []string
	for _, k := range AllFaults {
		if m[k] > 0 {
			out = append(out, k)
		}
	}
	for k := range m {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
