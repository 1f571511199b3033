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

	"idserver/engine"
	"idserver/persist"
)

// Fault kinds.
const (
	FKill          = "kill"              // kill -9, restart on the same directory and flags
	FPause         = "pause"             // SIGSTOP, then SIGCONT
	FIsolate       = "partition-isolate" // a node cut off from all others, both ways
	FOneWay        = "partition-oneway"  // a node cannot send to another
	FClockBack     = "clock-back"        // DEBUG CLOCK -1ms..-1h, then back to 0
	FClockForward  = "clock-forward"     // DEBUG CLOCK +1ms..+5s, then back to 0
	FClockStrobe   = "clock-strobe"      // DEBUG CLOCK jumping within ±500ms every few ms
	FForgetLive    = "forget-live"       // CLUSTER FORGET of a running node; a replacement joins while it runs on
	FReplace       = "replace-same-address"
	FWipeSameID    = "wipe-rejoin-same-id"
	FWrongLayout   = "join-wrong-layout" // a joiner with --worker-bits 9 --seq-bits 13
	FDiskFull      = "disk-full"         // a member's disk filled, then emptied
	FPowerCut      = "power-cut"         // a node's power cut: killed, its unsynced writes dropped (lazyfs), restarted
	FPowerCutAll   = "power-cut-all"     // the whole cluster's power cut at one instant
	FScaleUp       = "scale-up"          // a new node joins (a vacant slot filled)
	FScaleDown     = "scale-down"        // a node stopped for good: the cluster must remove it
	FRemoveCutLive = "partition-removed" // a node cut off past --dead-member-after: removed while it runs, then replaced
)

// Fault kinds of starvation, an isolated leader's FORGETs, and damage.
const (
	FCPUStarve  = "cpu-starve"      // a node (or every node) stopped most of each few ms: its CPU held for the hold
	FIsland     = "island"          // the leader cut off from every member, then asked to FORGET them all
	FFileDamage = "minority-damage" // a stopped node's Raft and Pebble files bit-flipped and truncated, then restarted
)

// AllFaults lists every fault kind, in the order tables print them.
var AllFaults = []string{FKill, FPause, FIsolate, FOneWay, FClockBack, FClockForward, FClockStrobe, FForgetLive, FReplace, FWipeSameID,
	FWrongLayout, FDiskFull, FPowerCut, FPowerCutAll, FScaleUp, FScaleDown, FRemoveCutLive, FSlowDisk,
	FCPUStarve, FIsland, FFileDamage}

var partitionFaults = []string{FIsolate, FOneWay, FRemoveCutLive, FIsland}
var clockFaults = []string{FClockBack, FClockForward, FClockStrobe}
var powerFaults = []string{FPowerCut, FPowerCutAll, FSlowDisk} // the faults that need lazyfs disks

// scaleFaults change how many nodes the cluster has (FRemoveCutLive needs
// a fourth: a cluster of three is never shrunk by its autopilot).
var scaleFaults = []string{FScaleUp, FScaleDown, FRemoveCutLive}

// autopilotFaults need a binary whose cluster removes dead members.
var autopilotFaults = []string{FScaleDown, FRemoveCutLive}

// The campaign's membership: at most campaignVoters voters among 3 to
// MaxNodes members; a member not heard from for Config.DeadMemberAfter
// (defaultDeadMemberAfter) is removed by the cluster (the server's default,
// 2 minutes, would make scale-down and partition-removed take minutes
// each), and a worker lease of a third of that, short enough that a
// removed member stops soon after (and SETs waiting for it too).
const (
	campaignVoters         = 3
	defaultDeadMemberAfter = 12 * time.Second
)

// membershipFlags are the flags for campaignVoters, dead and its lease
// that the binary knows.
func membershipFlags(flags map[string]bool, dead time.Duration) []string {
	var out []string
	if flags["voters"] {
		out = append(out, "--voters", strconv.Itoa(campaignVoters))
	}
	if flags["dead-member-after"] {
		out = append(out, "--dead-member-after", dead.String())
	}
	if flags["worker-lease"] {
		out = append(out, "--worker-lease", max(dead/3, time.Second).String())
	}
	return out
}

// Fault is one scheduled fault. Target -1 means whichever node leads when
// the fault starts; otherwise it picks one of the nodes the cluster has
// then (Target modulo their count), and so does Other.
type Fault struct {
	Kind   string
	Gap    time.Duration // quiet time before it
	Hold   time.Duration
	Target int
	Other  int // the second node of a one-way partition
	Amount time.Duration
}

func (f Fault) String() string {
	t := "leader"
	if f.Target >= 0 {
		t = "node" + strconv.Itoa(f.Target)
	}
	return fmt.Sprintf("+%v %s %s hold=%v amount=%v", f.Gap.Round(time.Millisecond), f.Kind, t, f.Hold.Round(time.Millisecond), f.Amount)
}

// weights make membership faults rarer than the cheap ones.
var weights = map[string]int{FKill: 6, FPause: 5, FIsolate: 5, FOneWay: 4, FClockBack: 5, FClockForward: 2, FClockStrobe: 2,
	FForgetLive: 2, FReplace: 3, FWipeSameID: 1, FWrongLayout: 1, FDiskFull: 2,
	FPowerCut: 4, FPowerCutAll: 2, FScaleUp: 2, FScaleDown: 2, FRemoveCutLive: 2, FSlowDisk: 2,
	FCPUStarve: 4, FIsland: 2, FFileDamage: 2}

// Schedule draws the faults of a campaign of the given length from seed;
// nodes is the most the cluster may have.
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
		case FKill, FPowerCut, FPowerCutAll, FReplace, FFileDamage:
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
		case FScaleUp:
			f.Hold = 0
		case FScaleDown:
			// What it takes: the removal after --dead-member-after.
			f.Hold = defaultDeadMemberAfter + 3*time.Second
		case FRemoveCutLive:
			// Cut off until removed, a few seconds more, then replaced.
			f.Hold = defaultDeadMemberAfter + 8*time.Second
		case FSlowDisk:
			f.Hold = time.Duration(3000+rng.IntN(7000)) * time.Millisecond
			f.Amount = time.Duration(500+rng.IntN(2500)) * time.Millisecond
		case FCPUStarve:
			// Stopped this long of every cycle (and running 2 ms).
			f.Amount = time.Duration(5+rng.IntN(46)) * time.Millisecond
		}
		t += f.Gap + f.Hold + beyondHold[f.Kind]
		if t > d {
			return out
		}
		out = append(out, f)
	}
}

// ScheduleCovering is Schedule with one fault of each kind in cover (those
// among kinds) first, in an order and with parameters drawn from seed, so
// that a short campaign injects each; the schedule stays within d.
func ScheduleCovering(seed uint64, d time.Duration, kinds, cover []string, nodes int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0xc04e))
	var out []Fault
	var t time.Duration
	for _, i := range rng.Perm(len(cover)) {
		if !slices.Contains(kinds, cover[i]) {
			continue
		}
		// The first fault of a schedule of that kind alone.
		f := Schedule(rng.Uint64(), time.Hour, cover[i:i+1], nodes)[0]
		t += f.Gap + f.Hold + beyondHold[f.Kind]
		out = append(out, f)
	}
	return append(out, Schedule(seed, d-t, kinds, nodes)...)
}

// beyondHold is about what a fault takes besides its hold, which a
// schedule counts: the island's FORGETs (5 s at most), a damaged node's
// restart and replacement.
var beyondHold = map[string]time.Duration{FIsland: 3 * time.Second, FFileDamage: 4 * time.Second}

// nemesis injects the scheduled faults into a running cluster.
type nemesis struct {
	c    *campaign
	rng  *rand.Rand // for choices made at run time (strobe offsets)
	seq  int        // replacement node IDs
	done int        // faults injected
	// damaged are the data directories minority-damage damaged: a
	// refusal to start on one is no anomaly.
	damaged map[string]bool
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

// leader is the slot whose node leads now, or a random slot.
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
	return nm.pick(nm.rng.IntN(16))
}

// pick is the slot a fault's Target or Other names: one of the nodes the
// cluster has now.
func (nm *nemesis) pick(i int) int {
	nodes := nm.c.pm.slots()
	return nodes[i%len(nodes)].slot
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

// joinList is --join for slot: every other node's RESP address, as a
// headless Service lists the pods.
func (nm *nemesis) joinList(slot int) string {
	var addrs []string
	for _, n := range nm.c.pm.slots() {
		if n.slot != slot {
			addrs = append(addrs, n.respAddr())
		}
	}
	return strings.Join(addrs, ",")
}

// restart starts n again on its own directory, with --join the others
// (the node that bootstrapped starts without, as it always did).
func (nm *nemesis) restart(n *node, wait time.Duration) (*proc, error) {
	if n.join != "" {
		n.join = nm.joinList(n.slot)
	}
	return nm.c.pm.start(n, n.join, wait)
}

// replaceAtAddress is a pod rescheduled with an empty volume: n's process
// killed if it runs, a new empty directory and a new node ID at the same
// addresses, --join the others. No FORGET: the cluster removes the member
// that held the address (it does not answer as itself there any more).
func (nm *nemesis) replaceAtAddress(n *node) (string, error) {
	c := nm.c
	old := n.nodeID
	n.kill()
	if err := c.pm.freshDir(n, nm.newNodeID(n.slot)); err != nil {
		return "", err
	}
	n.join = nm.joinList(n.slot)
	if _, err := c.pm.start(n, n.join, 40*time.Second); err != nil {
		return "", fmt.Errorf("%s's replacement %s at %s: %w", old, n.nodeID, n.respAddr(), err)
	}
	return fmt.Sprintf("%s replaced by %s at %s", old, n.nodeID, n.respAddr()), nil
}

func (nm *nemesis) inject(ctx context.Context, f Fault) {
	c := nm.c
	target := f.Target
	if target < 0 {
		target = nm.leader()
	} else {
		target = nm.pick(target)
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
		if _, err := nm.restart(n, 30*time.Second); err != nil {
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
			cuts = nm.isolation(n)
		} else {
			other := nm.pick(f.Other)
			if other == target {
				other = nm.pick(f.Other + 1)
			}
			cuts = append(cuts, [2]*node{n, c.pm.node(other)})
			ev.Slots = append(ev.Slots, other)
		}
		if !nm.cut(cuts, ev) {
			return
		}
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
	case FReplace:
		ev.Detail = "kill -9 " + n.nodeID + "; "
		n.kill()
		nm.sleep(ctx, f.Hold)
		what, err := nm.replaceAtAddress(n)
		if err != nil {
			ev.Detail += err.Error()
		} else {
			ev.Detail += what + ", no FORGET"
		}
	case FWipeSameID:
		nm.wipeSameID(n, ev)
	case FWrongLayout:
		nm.wrongLayout(ctx, f, ev)
	case FScaleUp, FScaleDown:
		switch nodes := len(c.pm.slots()); {
		case f.Kind == FScaleUp && nodes < c.cfg.MaxNodes, nodes <= c.cfg.Nodes:
			ev.Kind = FScaleUp // at the floor, a scale-down grows the cluster instead
			ev.Slots = nil
			nm.scaleUp(ev)
		default:
			ev.Kind = FScaleDown // at the most nodes, a scale-up shrinks it instead
			nm.scaleDown(ctx, n, ev)
		}
	case FRemoveCutLive:
		nm.removeCutLive(ctx, n, ev)
	case FSlowDisk:
		nm.slowDisk(ctx, n, f, ev)
	case FCPUStarve:
		nm.starve(ctx, n, f, ev)
	case FIsland:
		nm.island(ctx, f, ev)
	case FFileDamage:
		nm.damage(ctx, n, f, ev)
	}
}

// isolation is the cuts that isolate n from every other node, both ways.
func (nm *nemesis) isolation(n *node) [][2]*node {
	var cuts [][2]*node
	for _, m := range nm.c.pm.slots() {
		if m != n {
			cuts = append(cuts, [2]*node{n, m}, [2]*node{m, n})
		}
	}
	return cuts
}

// cut puts the cuts in place; false (the detail says why, and every cut
// is healed) when one failed.
func (nm *nemesis) cut(cuts [][2]*node, ev *FaultEvent) bool {
	var what []string
	for _, cut := range cuts {
		if err := nm.c.fw.cut(cut[0].uid, cut[1].host); err != nil {
			ev.Detail = err.Error()
			nm.c.fw.heal()
			return false
		}
		what = append(what, fmt.Sprintf("%s->%s", cut[0].nodeID, cut[1].nodeID))
	}
	ev.Detail = "cut " + strings.Join(what, " ")
	return true
}

// scaleUp fills the first vacant slot with a new node on an empty
// directory, --join the others (a StatefulSet scaled up by one).
func (nm *nemesis) scaleUp(ev *FaultEvent) {
	c := nm.c
	vacant := c.pm.vacantSlots()
	if len(vacant) == 0 {
		ev.Detail = "no vacant slot"
		return
	}
	n := vacant[0]
	ev.Slots = []int{n.slot}
	if err := c.pm.freshDir(n, nm.newNodeID(n.slot)); err != nil {
		ev.Detail = err.Error()
		return
	}
	n.vacant.Store(false)
	n.join = nm.joinList(n.slot)
	if _, err := c.pm.start(n, n.join, 40*time.Second); err != nil {
		ev.Detail = "new node " + n.nodeID + " at " + n.respAddr() + ": " + err.Error()
		return
	}
	ev.Detail = fmt.Sprintf("new node %s at %s joined: %d nodes", n.nodeID, n.respAddr(), len(c.pm.slots()))
}

// scaleDown stops n for good (its slot vacant, its directory gone) and
// waits for the cluster to remove it, as it must after --dead-member-after.
func (nm *nemesis) scaleDown(ctx context.Context, n *node, ev *FaultEvent) {
	c := nm.c
	n.kill()
	n.vacant.Store(true)
	os.RemoveAll(n.dir)
	ev.Detail = fmt.Sprintf("%s stopped for good: %d nodes", n.nodeID, len(c.pm.slots()))
	took, err := nm.waitRemoved(ctx, n.nodeID, n.slot, 2*nm.c.cfg.DeadMemberAfter+30*time.Second)
	if err != nil {
		ev.Detail += "; " + err.Error()
		if ctx.Err() != nil {
			return // the campaign ends
		}
		c.hist.addMembership(Anomaly{At: c.since(), Kind: "dead-member-kept", Msg: fmt.Sprintf("%s was stopped for good at %s (scale-down) and: %v", n.nodeID, fmtDur(ev.Start), err)})
		return
	}
	ev.Detail += fmt.Sprintf("; removed by the cluster %v later", took.Round(100*time.Millisecond))
}

// removeCutLive cuts n off (both ways, from every other node) until the
// cluster removes it while it runs, keeps its clients on it a few seconds
// more (it must hand out nothing: its lease ended, the checker's
// issued-after-removal), heals, and restarts it on its directory, where it
// must join again by itself. The cluster needs a fourth node for that (it
// never shrinks below three):
// the fault first scales up when it has three.
func (nm *nemesis) removeCutLive(ctx context.Context, n *node, ev *FaultEvent) {
	c := nm.c
	if c.fw == nil {
		return
	}
	var did []string
	if len(c.pm.slots()) < 4 {
		up := &FaultEvent{}
		nm.scaleUp(up)
		did = append(did, "first "+up.Detail)
		if len(c.pm.slots()) < 4 {
			ev.Detail = strings.Join(did, "; ")
			return
		}
	}
	ghost := n.running()
	if ghost == nil {
		ev.Detail = strings.Join(append(did, n.nodeID+" not running"), "; ")
		return
	}
	if !nm.cut(nm.isolation(n), ev) {
		return
	}
	did = append(did, ev.Detail)
	defer func() { ev.Detail = strings.Join(did, "; ") }()
	took, err := nm.waitRemoved(ctx, n.nodeID, n.slot, 2*nm.c.cfg.DeadMemberAfter+30*time.Second)
	if err != nil {
		c.fw.heal()
		did = append(did, err.Error())
		if ctx.Err() != nil {
			return // the campaign ends
		}
		c.hist.addMembership(Anomaly{At: c.since(), Kind: "dead-member-kept", Msg: fmt.Sprintf("%s was cut off from every other node at %s and: %v", n.nodeID, fmtDur(ev.Start), err)})
		return
	}
	c.hist.addRemoval(removal{Proc: ghost.gen, NodeID: n.nodeID, At: c.since()})
	lease := "its lease unknown"
	if info, err := clusterInfo(ghost.addr); err == nil {
		switch end, err := strconv.ParseInt(info["worker_lease_end_ms"], 10, 64); {
		case err == nil && end > 0:
			// ID time: ms since the layout's epoch (the campaign runs the default layout).
			at := engine.DefaultLayout().Epoch.Add(time.Duration(end) * time.Millisecond)
			lease = fmt.Sprintf("its lease ended %v before", time.Since(at).Round(100*time.Millisecond))
		case err == nil:
			lease = "it shows no lease"
		}
	}
	did = append(did, fmt.Sprintf("removed by the cluster %v after the cut, while it runs (%s)", took.Round(100*time.Millisecond), lease))
	nm.sleep(ctx, 3*time.Second)
	if err := c.fw.heal(); err != nil {
		did = append(did, "heal: "+err.Error())
	}
	nm.sleep(ctx, 2*time.Second)
	// As Kubernetes does once the liveness probe fails (/healthz answers
	// 503 on a removed member): the pod restarts on its volume, and must
	// join again as a new member by itself.
	n.kill()
	if _, err := nm.restart(n, 40*time.Second); err != nil {
		did = append(did, "healed; restarted on its directory: "+err.Error())
		c.hist.addMembership(Anomaly{At: c.since(), Kind: "removed-not-rejoined", Msg: fmt.Sprintf("%s, removed while cut off, restarted on its directory and: %v", n.nodeID, err)})
		return
	}
	did = append(did, "healed; restarted on its directory, joined again")
}

// leaderInfo is CLUSTER INFO of the node that leads, asked of every
// running node but exclude's, for at most wait.
func (nm *nemesis) leaderInfo(exclude int, wait time.Duration) (map[string]string, error) {
	for deadline := time.Now().Add(wait); ; time.Sleep(200 * time.Millisecond) {
		for _, n := range nm.c.pm.slots() {
			if p := n.running(); p != nil && n.slot != exclude {
				if info, err := clusterInfo(p.addr); err == nil && info["role"] == "Leader" {
					return info, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no node leads (%v)", wait)
		}
	}
}

// memberInfo is a member as the leader's CLUSTER INFO lists it.
type memberInfo struct{ id, suffrage, health string }

// membersOf lists the members in a CLUSTER INFO (its member<i> lines).
func membersOf(info map[string]string) []memberInfo {
	var out []memberInfo
	for i := 0; ; i++ {
		line, ok := info["member"+strconv.Itoa(i)]
		if !ok {
			return out
		}
		var m memberInfo
		for _, kv := range strings.Split(line, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "id":
				m.id = v
			case "suffrage":
				m.suffrage = v
			case "health":
				m.health = v
			}
		}
		out = append(out, m)
	}
}

// waitRemoved waits until the leader (not exclude) lists nodeID no more,
// and says how long that took.
func (nm *nemesis) waitRemoved(ctx context.Context, nodeID string, exclude int, wait time.Duration) (time.Duration, error) {
	began := time.Now()
	for deadline := began.Add(wait); ctx.Err() == nil; nm.sleep(ctx, 250*time.Millisecond) {
		info, err := nm.leaderInfo(exclude, 5*time.Second)
		if err == nil && !slices.ContainsFunc(membersOf(info), func(m memberInfo) bool { return m.id == nodeID }) {
			return time.Since(began), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("still a member %v later (--dead-member-after %v)", wait, nm.c.cfg.DeadMemberAfter)
		}
	}
	return 0, ctx.Err()
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
		wg.Go(func() { _, errs[i] = nm.restart(n, 40*time.Second) })
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

// forgetLive forgets a running node (an operator's FORGET of a node that
// runs on, a mistake the cluster survives: docs/operations.md, "A cluster"),
// starts its replacement (new node ID, new directory and ports: the
// forgotten process still holds the old ones) while it runs on, keeps a
// client on the forgotten one for the hold, then kills it.
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
	if nm.liveOther(n.slot) < 0 {
		ev.Detail += "; no member left to join"
	} else if err := c.pm.freshDir(repl, nm.newNodeID(n.slot)); err != nil {
		ev.Detail += "; " + err.Error()
	} else {
		repl.join = nm.joinList(n.slot)
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

// wipeSameID kills a node and starts it on an empty directory under the
// same node ID at the same address, --join the others (a replaced disk
// under a member's name), which is refused (docs/operations.md, "Mistakes
// the cluster refuses"). Refused, the
// pod gets what a StatefulSet without volumes gives it: a new empty
// directory and a new node ID at the same address, no FORGET.
func (nm *nemesis) wipeSameID(n *node, ev *FaultEvent) {
	c := nm.c
	if nm.liveOther(n.slot) < 0 {
		ev.Detail = "no other member running"
		return
	}
	n.kill()
	if err := c.pm.freshDir(n, n.nodeID); err != nil {
		ev.Detail = err.Error()
		return
	}
	n.join = nm.joinList(n.slot)
	p, err := c.pm.start(n, n.join, 20*time.Second)
	if err == nil {
		ev.Detail = "empty directory under member ID " + n.nodeID + " accepted"
		c.hist.addMembership(Anomaly{At: c.since(), Kind: "membership", Msg: fmt.Sprintf("%s restarted on an empty directory under its member node ID and joined (the spec says: refused, remedy FORGET or a new --node-id); log %s", n.nodeID, p.logf)})
		return
	}
	ev.Detail = "empty directory under " + n.nodeID + " refused (" + firstLine(err.Error()) + "); "
	what, err := nm.replaceAtAddress(n)
	if err != nil {
		ev.Detail += err.Error()
		return
	}
	ev.Detail += what + ", no FORGET"
}

// KRepair is the fault-table kind of the repairs the nemesis makes before
// each fault and at the heal.
const KRepair = "repair"

// repair brings the cluster back to full strength before the next fault,
// doing only what a Kubernetes StatefulSet does, never an operator's
// command: a slot whose node is down is started again on its directory (a
// member removed while it was down joins again by itself); a slot whose
// restart is refused (a joiner killed before it stored its worker ID), or
// whose process runs
// but is no member any more, is given an empty directory and a new node
// ID at the same address, --join the others. Then it waits until the
// cluster has settled: as many voters as it wants (campaignVoters, at most
// its members), each of them a node that runs, so that the next fault takes
// at most one voter away for its hold. Dead members, strays and stale IDs
// are the cluster's to remove: the nemesis forgets nobody.
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
		p, err := nm.restart(n, 40*time.Second)
		if err == nil {
			did = append(did, "restarted "+n.nodeID)
			continue
		}
		if p == nil || !p.exited() {
			problems = append(problems, err.Error())
			continue // slow, not refused: it may still come up
		}
		if tail := tailLog(p.logf, 5); strings.Contains(tail, persist.ErrDamaged.Error()) && !nm.damaged[n.dir] {
			// No fault damages a disk (a power cut drops only what was
			// never synced): a node that refuses its own directory as
			// damaged lost what it synced, or its check is wrong.
			c.hist.addMembership(Anomaly{At: c.since(), Kind: "refused-damaged", Msg: fmt.Sprintf("%s refused its own directory as damaged; log %s\n%s", p.nodeID, p.logf, indent(tail))})
		}
		what, rerr := nm.replaceAtAddress(n)
		if rerr != nil {
			problems = append(problems, fmt.Sprintf("%s refused to start (%s); %v", p.nodeID, firstLine(err.Error()), rerr))
			continue
		}
		did = append(did, fmt.Sprintf("%s refused to start (%s): %s", p.nodeID, firstLine(err.Error()), what))
	}
	// The member list is read once the cluster has settled: a leader just
	// elected after a power cut of every node lists what its state machine
	// has applied, which may lack the members that joined lately, and
	// replacing those would take live members away.
	nm.waitSettled(30 * time.Second)
	if info, err := nm.leaderInfo(-1, 10*time.Second); err != nil {
		problems = append(problems, "member list: "+err.Error())
	} else {
		members := membersOf(info)
		for _, n := range c.pm.slots() {
			if n.running() == nil || slices.ContainsFunc(members, func(m memberInfo) bool { return m.id == n.nodeID }) {
				continue
			}
			ev.Slots = append(ev.Slots, n.slot)
			if what, err := nm.replaceAtAddress(n); err != nil {
				problems = append(problems, "runs but is no member: "+err.Error())
			} else {
				did = append(did, "runs but is no member: "+what)
			}
		}
	}
	waited := time.Now()
	if state, err := nm.waitSettled(30 * time.Second); err != nil {
		problems = append(problems, err.Error())
	} else if state != "" {
		did = append(did, fmt.Sprintf("waited %v for the voters (%s)", time.Since(waited).Round(time.Millisecond), state))
	}
	if len(did)+len(problems) > 0 {
		ev.End = c.since()
		ev.Detail = strings.Join(append(did, problems...), "; ")
		c.hist.addFault(ev)
		c.logf("fault %s", ev)
	}
	return problems
}

// waitSettled waits until the leader lists as many voters as the cluster
// wants, each a node that runs; it returns "" when that held at once, or
// what was unsettled at first.
func (nm *nemesis) waitSettled(wait time.Duration) (string, error) {
	c := nm.c
	first := ""
	for deadline := time.Now().Add(wait); ; time.Sleep(200 * time.Millisecond) {
		state := "no leader"
		if info, err := nm.leaderInfo(-1, 5*time.Second); err == nil {
			running := map[string]bool{}
			for _, n := range c.pm.slots() {
				if n.running() != nil {
					running[n.nodeID] = true
				}
			}
			voters, live, down := 0, 0, []string{}
			for _, m := range membersOf(info) {
				if running[m.id] {
					live++
				}
				if m.suffrage == "voter" {
					voters++
					if !running[m.id] {
						down = append(down, m.id)
					}
				}
			}
			want := min(campaignVoters, live)
			if want%2 == 0 {
				want--
			}
			if len(down) == 0 && voters >= want {
				return first, nil
			}
			state = fmt.Sprintf("%d voters of %d wanted, not running: %v", voters, want, down)
		}
		if first == "" {
			first = state
		}
		if time.Now().After(deadline) {
			return first, fmt.Errorf("the cluster did not settle within %v: %s", wait, state)
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// wrongLayout starts a joiner with another layout. It must be refused; if
// it is accepted, a client issues on it for the hold (its IDs go into the
// history) before it is killed.
func (nm *nemesis) wrongLayout(ctx context.Context, f Fault, ev *FaultEvent) {
	c := nm.c
	other := nm.liveOther(-1)
	if other < 0 {
		ev.Detail = "no member running"
		return
	}
	slot := c.cfg.MaxNodes // beyond every slot the cluster may use
	extra := &node{slot: slot, host: c.hostFor(slot), uid: c.uidFor(slot)}
	if err := c.pm.freshDir(extra, nm.newNodeID(extra.slot)); err != nil {
		ev.Detail = err.Error()
		return
	}
	extra.layout = []string{"--worker-bits", "9", "--seq-bits", "13"}
	ev.Slots = []int{extra.slot}
	p, err := c.pm.start(extra, nm.joinList(-1), 20*time.Second)
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
	// Killed (deferred): a dead member the cluster removes after
	// --dead-member-after, like any other.
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
