package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anishathalye/porcupine"
)

// Anomaly is one broken promise, with the ops that show it.
type Anomaly struct {
	At     time.Duration // since the campaign's start, when it showed (for anomalies without ops)
	Kind   string
	Msg    string
	Ops    []*Op
	Faults []*FaultEvent
}

// Report is the anomaly as printed: the seed, what broke, the ops that
// show it and the faults around them.
func (a *Anomaly) Report(seed uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ANOMALY %s (seed %d): %s\n", a.Kind, seed, a.Msg)
	for _, op := range a.Ops {
		fmt.Fprintf(&b, "    %s\n", op)
	}
	for _, f := range a.Faults {
		fmt.Fprintf(&b, "    %s\n", f)
	}
	return b.String()
}

// Verdict is what the checker found.
type Verdict struct {
	Anomalies     []Anomaly
	Counts        map[string]int           // anomalies by kind, including those not listed
	FirstAt       map[string]time.Duration // when each kind was first shown (the latest reply of its first excerpt)
	ValuesChecked int64                    // IDs and segment values acknowledged
	OpsByKind     map[string][3]int
	Porcupine     map[string]porcupine.CheckResult // by tag
}

// afterMistake marks an anomaly kind seen after the cluster accepted a
// membership mistake (a joiner with another layout, an empty directory under
// a member's node ID): the acceptance is the anomaly that matters, what
// follows may be its consequence.
const afterMistake = "-after-accepted-mistake"

// invalidUTF8Tag marks an anomaly kind shown on a tag whose name is not
// valid UTF-8.
const invalidUTF8Tag = "-invalid-utf8-tag"

// isTagOp says whether op's Key is a tag (not a buyer).
func isTagOp(op *Op) bool {
	switch op.Kind {
	case KIncr, KIncrBy, KNextSeg, KSet, KGet:
		return true
	}
	return false
}

// maxListed is how many anomalies of one kind are listed in full.
const maxListed = 5

type checker struct {
	// tainted is when the cluster first accepted a membership mistake the
	// docs say it refuses (docs/operations.md, "Mistakes the cluster refuses"); later anomalies may follow from it and are
	// counted under kind+afterMistake.
	tainted  time.Duration
	h        *History
	v        *Verdict
	geneMask int64
	borrow   time.Duration
}

func (c *checker) add(kind, msg string, ops ...*Op) { c.addN(kind, 1, msg, ops...) }

// addN counts n anomalies of kind shown by the same ops.
func (c *checker) addN(kind string, n int, msg string, ops ...*Op) {
	var at time.Duration
	invalidTag := false
	for _, op := range ops {
		at = max(at, op.End)
		invalidTag = invalidTag || isTagOp(op) && !utf8.ValidString(op.Key)
	}
	if invalidTag {
		kind += invalidUTF8Tag
	}
	if at > c.tainted {
		kind += afterMistake
	}
	if first, seen := c.v.FirstAt[kind]; !seen || at < first {
		c.v.FirstAt[kind] = at
	}
	c.v.Counts[kind] += n
	if c.v.Counts[kind]-n >= maxListed {
		return
	}
	var from, to time.Duration = math.MaxInt64, 0
	for _, op := range ops {
		from, to = min(from, op.Start), max(to, op.End)
	}
	c.v.Anomalies = append(c.v.Anomalies, Anomaly{Kind: kind, Msg: msg, Ops: ops, Faults: c.h.faultsAround(from, to)})
}

// Check reads the whole history. geneBits is the layout's (8 by default);
// porcupineTimeout bounds the linearizability check of each tag.
func Check(h *History, geneBits int, porcupineTimeout time.Duration) *Verdict {
	c := &checker{h: h, v: &Verdict{Counts: map[string]int{}, FirstAt: map[string]time.Duration{}, OpsByKind: map[string][3]int{}, Porcupine: map[string]porcupine.CheckResult{}},
		geneMask: 1<<geneBits - 1, borrow: time.Second, tainted: math.MaxInt64}
	for _, a := range h.Membership {
		if a.Kind == "membership" {
			c.tainted = min(c.tainted, a.At)
		}
	}
	for _, op := range h.Ops {
		k := c.v.OpsByKind[op.Kind.String()]
		k[op.Outcome]++
		c.v.OpsByKind[op.Kind.String()] = k
		if strings.HasPrefix(op.Err, "unexpected reply") {
			c.add("bad-reply", "a reply of the wrong shape", op)
		}
	}
	for _, a := range h.Membership {
		if a.Kind != "membership" && a.At > c.tainted {
			a.Kind += afterMistake
		}
		if first, seen := c.v.FirstAt[a.Kind]; !seen || a.At < first {
			c.v.FirstAt[a.Kind] = a.At
		}
		c.v.Counts[a.Kind]++
		c.v.Anomalies = append(c.v.Anomalies, a)
	}
	c.uniqueIDs()
	c.idOrder()
	c.segments()
	c.floors()
	c.clockBack()
	c.afterRemoval()
	c.linearizable(porcupineTimeout)
	return c.v
}

func ok(op *Op) bool { return op.Outcome == OK }

func isAlloc(k Kind) bool { return k == KIncr || k == KIncrBy || k == KNextSeg }

// uniqueIDs: no snowflake or gene ID acknowledged twice, anywhere. The IDs
// are sorted bare (8 bytes each, a long campaign has 10^8), and only the
// repeated ones are traced back to their ops.
func (c *checker) uniqueIDs() {
	var all []int64
	for _, op := range c.h.Ops {
		if ok(op) && (op.Kind == KNextID || op.Kind == KGeneID) {
			all = append(all, op.IDs...)
		}
	}
	c.v.ValuesChecked += int64(len(all))
	slices.Sort(all)
	repeated := map[int64][]*Op{}
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			repeated[all[i]] = nil
		}
	}
	all = nil
	if len(repeated) == 0 {
		return
	}
	for _, op := range c.h.Ops {
		if ok(op) && (op.Kind == KNextID || op.Kind == KGeneID) {
			for _, id := range op.IDs {
				if owners, dup := repeated[id]; dup {
					repeated[id] = append(owners, op)
				}
			}
		}
	}
	// One anomaly per pair of ops, counting the IDs they share.
	type pair struct{ a, b *Op }
	shared := map[pair][]int64{}
	var order []pair
	for id, owners := range repeated {
		for i := 1; i < len(owners); i++ {
			p := pair{owners[i-1], owners[i]}
			if shared[p] == nil {
				order = append(order, p)
			}
			shared[p] = append(shared[p], id)
		}
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].a.Index != order[j].a.Index {
			return order[i].a.Index < order[j].a.Index
		}
		return order[i].b.Index < order[j].b.Index
	})
	for _, p := range order {
		kind := "duplicate-id"
		for _, op := range []*Op{p.a, p.b} {
			if op.Ghost != "" {
				kind = "duplicate-id-" + op.Ghost
			}
		}
		ids := shared[p]
		slices.Sort(ids)
		c.addN(kind, len(ids), fmt.Sprintf("%d IDs acknowledged twice, from %d to %d", len(ids), ids[0], ids[len(ids)-1]), p.a, p.b)
	}
}

// increasing checks that, within each group, an op that started after
// another was acknowledged carries values above all of the other's, and
// that each op's own values increase. lo and hi give an op's values.
func (c *checker) increasing(kind string, groups map[string][]*Op, lo, hi func(*Op) int64) {
	for key, ops := range groups {
		byStart := slices.Clone(ops)
		sort.Slice(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
		byEnd := slices.Clone(ops)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
		var top *Op
		j := 0
		for _, op := range byStart {
			for ; j < len(byEnd) && byEnd[j].End < op.Start; j++ {
				if top == nil || hi(byEnd[j]) > hi(top) {
					top = byEnd[j]
				}
			}
			if top != nil && lo(op) <= hi(top) {
				c.add(kind, fmt.Sprintf("%s: %d acknowledged after %d (sent after that was acknowledged)", key, lo(op), hi(top)), top, op)
			}
		}
	}
}

// idOrder: NEXTIDs of one node and worker ID strictly increase, and
// GENEIDs of one node, worker ID and gene, for requests that do not overlap
// in time. Per worker: a node whose clock went back further than
// --max-borrow takes a fresh worker ID, and its order restarts with it
// (docs/guarantees.md, promise 2). The campaign runs the default layout (10 worker bits
// above 12 sequence bits).
func (c *checker) idOrder() {
	worker := func(id int64) int64 { return id >> 12 & 1023 }
	next := map[string][]*Op{}
	gene := map[string][]*Op{}
	for _, op := range c.h.Ops {
		if !ok(op) {
			continue
		}
		for i := 1; i < len(op.IDs); i++ {
			if op.IDs[i] <= op.IDs[i-1] {
				c.add("id-order", fmt.Sprintf("IDs of one reply do not increase: %d then %d", op.IDs[i-1], op.IDs[i]), op)
				break
			}
		}
		switch {
		case len(op.IDs) == 0:
		case op.Kind == KNextID:
			k := fmt.Sprintf("NEXTID node %s worker %d", op.Node, worker(op.IDs[0]))
			next[k] = append(next[k], op)
		case op.Kind == KGeneID:
			k := fmt.Sprintf("GENEID node %s worker %d gene %d", op.Node, worker(op.IDs[0]), op.IDs[0]&c.geneMask)
			gene[k] = append(gene[k], op)
		}
	}
	first := func(op *Op) int64 { return op.IDs[0] }
	last := func(op *Op) int64 { return op.IDs[len(op.IDs)-1] }
	c.increasing("id-order", next, first, last)
	c.increasing("gene-order", gene, first, last)
}

// segments: the values of a tag are never acknowledged twice, ranges have
// the size asked for, and one node's values of a tag increase.
func (c *checker) segments() {
	byTag := map[string][]*Op{}
	byNode := map[string][]*Op{}
	for _, op := range c.h.Ops {
		if !ok(op) || !isAlloc(op.Kind) {
			continue
		}
		want := op.N
		if op.Kind == KIncr {
			want = 1
		}
		if op.Last-op.First+1 != want || op.First < 1 {
			c.add("segment-size", fmt.Sprintf("%s %s %d answered [%d, %d]", op.Kind, showTag(op.Key), op.N, op.First, op.Last), op)
			continue
		}
		c.v.ValuesChecked += want
		byTag[op.Key] = append(byTag[op.Key], op)
		k := "tag " + showTag(op.Key) + " node " + op.Node
		byNode[k] = append(byNode[k], op)
	}
	for tag, ops := range byTag {
		sort.Slice(ops, func(i, j int) bool { return ops[i].First < ops[j].First })
		var reach *Op // the op reaching highest so far
		for _, op := range ops {
			if reach != nil && op.First <= reach.Last {
				c.add("duplicate-value", fmt.Sprintf("tag %s: values %d..%d acknowledged twice", showTag(tag), op.First, min(op.Last, reach.Last)), reach, op)
			}
			if reach == nil || op.Last > reach.Last {
				reach = op
			}
		}
	}
	c.increasing("value-order", byNode, func(op *Op) int64 { return op.First }, func(op *Op) int64 { return op.Last })
}

// floors: after SET tag v is acknowledged, no value <= v of tag is
// acknowledged to a request sent later, unless another SET lowered the tag
// in between (SET may lower a tag below values reserved but never issued);
// and a SET meant to lower below a value already acknowledged is never
// acknowledged.
func (c *checker) floors() {
	sets := map[string][]*Op{}
	allocs := map[string][]*Op{}
	for _, op := range c.h.Ops {
		switch {
		case !ok(op):
		case op.Kind == KSet && op.Lower && c.issuedAbove(op) != nil:
			c.add("set-lowered", fmt.Sprintf("SET %s %d answered OK below a value already acknowledged", showTag(op.Key), op.N), c.issuedAbove(op), op)
		case op.Kind == KSet:
			sets[op.Key] = append(sets[op.Key], op)
		case isAlloc(op.Kind):
			allocs[op.Key] = append(allocs[op.Key], op)
		}
	}
	c.refusedSets()
	c.staleGets()
	for tag, ss := range sets {
		sort.Slice(ss, func(i, j int) bool { return ss[i].End < ss[j].End })
		as := allocs[tag]
		sort.Slice(as, func(i, j int) bool { return as[i].Start < as[j].Start })
		var top *Op
		j := 0
		for _, a := range as {
			for ; j < len(ss) && ss[j].End < a.Start; j++ {
				if top == nil || ss[j].N > top.N {
					top = ss[j]
				}
			}
			if top != nil && a.First <= top.N && !c.lowered(tag, top, a.First, a.End) {
				kind := "below-floor"
				if a.Ghost != "" {
					kind += "-" + a.Ghost
				}
				c.add(kind, fmt.Sprintf("tag %s: %d acknowledged after SET %d was", showTag(tag), a.First, top.N), top, a)
			}
		}
	}
}

// issuedAbove is an allocation of set's tag acknowledged above its value
// before it was sent, or nil.
func (c *checker) issuedAbove(set *Op) *Op {
	for _, a := range c.h.Ops {
		if ok(a) && isAlloc(a.Kind) && a.Key == set.Key && a.Last > set.N && a.End < set.Start {
			return a
		}
	}
	return nil
}

// unansweredReach is how long after it was sent a request its client gave
// up on (no reply in time, or the connection broke) may still take effect:
// the server works on it for up to its request timeout (cluster
// Timing.Request, 9 s by default; a SET may wait that long for a removed
// member's lease), and an entry it appended may be committed by the next
// leader after an election.
const unansweredReach = 15 * time.Second

// effectEnd is when op's effect, if it has one, has certainly landed: its
// answer, or, for a request never answered, unansweredReach after it was
// sent (the client's own timeout is shorter than the server's).
func effectEnd(op *Op) time.Duration {
	if op.Outcome == Unknown && !strings.HasPrefix(op.Err, "-") {
		return max(op.End, op.Start+unansweredReach)
	}
	return op.End
}

// lowered says whether a SET of tag that may have taken effect (answered
// OK, or unknown) set it below `below`, in a way that linearizes after
// `after` (it had not taken effect before after started) and before an
// operation ending at `by`.
func (c *checker) lowered(tag string, after *Op, below int64, by time.Duration) bool {
	for _, w := range c.h.Ops {
		if w.Kind == KSet && w.Key == tag && w != after && w.Outcome != Refused &&
			w.N < below && w.Start < by && effectEnd(w) > after.Start {
			return true
		}
	}
	return false
}

// refusedSets: SET v succeeds whenever no value above v was issued to a
// client (docs/commands.md, SET). A raising SET refused with "values never go back"
// is an anomaly when no request sent before the refusal could have given a
// client a value above v: no allocation acknowledged above v, none whose
// outcome is unknown, and no SET above v.
func (c *checker) refusedSets() {
	type mark struct {
		start time.Duration
		v     int64
	}
	marks := map[string][]mark{}
	var refused []*Op
	for _, op := range c.h.Ops {
		switch {
		case op.Kind == KSet && op.Outcome == Refused && !op.Lower && strings.HasPrefix(op.Err, "-ERR values never go back"):
			refused = append(refused, op)
		case op.Kind == KSet && op.Outcome != Refused:
			marks[op.Key] = append(marks[op.Key], mark{op.Start, op.N})
		case isAlloc(op.Kind) && op.Outcome == OK:
			marks[op.Key] = append(marks[op.Key], mark{op.Start, op.Last})
		case isAlloc(op.Kind) && op.Outcome == Unknown:
			marks[op.Key] = append(marks[op.Key], mark{op.Start, math.MaxInt64})
		}
	}
	top := map[string][]mark{} // by start, with the running maximum
	for tag, ms := range marks {
		sort.Slice(ms, func(i, j int) bool { return ms[i].start < ms[j].start })
		for i := 1; i < len(ms); i++ {
			ms[i].v = max(ms[i].v, ms[i-1].v)
		}
		top[tag] = ms
	}
	for _, op := range refused {
		if c.restartedBefore(op) {
			continue
		}
		ms := top[op.Key]
		i := sort.Search(len(ms), func(i int) bool { return ms[i].start >= op.End })
		if i == 0 || ms[i-1].v <= op.N {
			c.add("set-refused", fmt.Sprintf("SET %s %d refused, yet no value above %d had been issued to a client (highest seen: %d)", showTag(op.Key), op.N, op.N, func() int64 {
				if i == 0 {
					return 0
				}
				return ms[i-1].v
			}()), op)
		}
	}
}

// restartedBefore: a SET refused because a node that restarted or left
// since its last allocation may have issued what it was given (it cannot
// tell), at a time when the nemesis had restarted, replaced or removed a
// node (a damaged node is restarted; an island's FORGETs remove members).
func (c *checker) restartedBefore(op *Op) bool {
	if !strings.Contains(op.Err, "restarted") {
		return false
	}
	for _, f := range c.h.Faults {
		if f.Start < op.End && slices.Contains([]string{FKill, FPowerCut, FPowerCutAll, FForgetLive, FReplace, FWipeSameID, FDiskFull, FScaleDown, FRemoveCutLive, FFileDamage, FIsland, KRepair}, f.Kind) {
			return true
		}
	}
	return false
}

// staleGets: GET answers the tag's cluster-wide high-water, at least every
// value issued and every floor set: a GET sent after a value (or SET) was
// acknowledged answers at least that.
func (c *checker) staleGets() {
	marks := map[string][]*Op{}
	gets := map[string][]*Op{}
	for _, op := range c.h.Ops {
		switch {
		case !ok(op):
		case op.Kind == KGet:
			gets[op.Key] = append(gets[op.Key], op)
		case op.Kind == KSet || isAlloc(op.Kind):
			marks[op.Key] = append(marks[op.Key], op)
		}
	}
	value := func(op *Op) int64 {
		if op.Kind == KSet {
			return op.N
		}
		return op.Last
	}
	for tag, gs := range gets {
		ms := marks[tag]
		sort.Slice(ms, func(i, j int) bool { return ms[i].End < ms[j].End })
		sort.Slice(gs, func(i, j int) bool { return gs[i].Start < gs[j].Start })
		var top *Op
		j := 0
		for _, g := range gs {
			for ; j < len(ms) && ms[j].End < g.Start; j++ {
				if top == nil || value(ms[j]) > value(top) {
					top = ms[j]
				}
			}
			if top != nil && (g.Nil || g.Last < value(top)) && !(top.Kind == KSet && c.lowered(tag, top, g.Last+1, g.End)) {
				c.add("stale-get", fmt.Sprintf("tag %s: GET answered %d after %d was acknowledged", showTag(tag), g.Last, value(top)), top, g)
			}
		}
	}
}

// clockBack: CLOCKBACK only on a node whose clock went back (a DEBUG CLOCK
// step down, or a start resetting a forward offset), within the time it
// takes the clock to catch up.
func (c *checker) clockBack() {
	for _, op := range c.h.Ops {
		if !strings.HasPrefix(op.Err, "-CLOCKBACK") {
			continue
		}
		allowed := false
		for _, ch := range c.h.Clocks {
			if ch.Slot == op.Slot && ch.To < ch.From && ch.At <= op.End && op.Start <= ch.At+(ch.From-ch.To)+c.borrow+3*time.Second {
				allowed = true
				break
			}
		}
		if !allowed {
			c.add("clockback", "CLOCKBACK while the node's clock had not gone back", op)
		}
	}
}

// Porcupine's model of one tag: a counter that SET may move down, but not
// below a value already issued. State is the floor (the last SET) and the
// largest value acknowledged.
type tagState struct{ floor, issued int64 }

type tagInput struct {
	kind Kind
	v    int64 // SET value
}

type tagOutput struct {
	first, last int64
	null        bool
	unknown     bool // a SET whose outcome is unknown: it took effect or not
}

// tagModel starts from any of the states in init: those a quiescent point
// may leave.
func tagModel(init []tagState) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} {
			out := make([]interface{}, len(init))
			for i, s := range init {
				out[i] = s
			}
			return out
		},
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(tagState), input.(tagInput), output.(tagOutput)
			var next []interface{}
			switch in.kind {
			case KIncr, KIncrBy, KNextSeg:
				// Values come from buffers, so they need not exceed the
				// largest issued; they must exceed the floor.
				if out.first > s.floor {
					next = append(next, tagState{s.floor, max(s.issued, out.last)})
				}
			case KGet:
				if out.null && s.floor == 0 && s.issued == 0 || !out.null && out.last >= s.issued && out.last >= s.floor {
					next = append(next, s)
				}
			default: // a SET, acknowledged or unknown
				if in.v >= s.issued {
					next = append(next, tagState{in.v, s.issued})
				}
				if out.unknown {
					next = append(next, s)
				}
			}
			return next
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(tagInput), output.(tagOutput)
			return fmt.Sprintf("%s %d -> [%d, %d]", in.kind, in.v, out.first, out.last)
		},
	}
	return nm.ToModel()
}

// linearizable checks each tag's history against tagModel with porcupine.
//
// Only acknowledged operations go in. Allocations and GETs whose outcome is
// unknown constrain nothing. A SET whose outcome is unknown may or may not
// have raised the floor; a higher floor only ever makes later operations
// less likely to be legal (allocations must exceed it, GETs reach it), so the
// branch where it did not take effect is always at least as permissive, and
// leaving it out is the same as modelling both outcomes. A refused SET is
// left out too: the node may count values reserved in buffers that no client
// saw, which the model cannot know.
//
// The history is cut at quiescent points (no operation in flight) and the
// pieces are checked one after the other, each from the state the ones
// before leave, which is determined there: the largest acknowledged SET
// and value. This keeps porcupine's search, and its memory, to the size of
// a piece, whatever the length of the campaign.
func (c *checker) linearizable(timeout time.Duration) {
	byTag := map[string][]*Op{}
	for _, op := range c.h.Ops {
		if (isAlloc(op.Kind) || op.Kind == KSet || op.Kind == KGet) && (op.Outcome == OK || op.Kind == KSet && op.Outcome == Unknown) {
			byTag[op.Key] = append(byTag[op.Key], op)
		}
	}
	for tag, ops := range byTag {
		sort.Slice(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
		deadline := time.Now().Add(timeout)
		result := porcupine.Ok
		state := []tagState{{}}
		var piece []porcupine.Operation
		var reach time.Duration
		check := func() {
			if len(piece) == 0 {
				return
			}
			left := time.Until(deadline)
			if left <= 0 {
				result = porcupine.Unknown
				return
			}
			model := tagModel(state)
			switch porcupine.CheckOperationsTimeout(model, piece, left) {
			case porcupine.Illegal:
				result = porcupine.Illegal
				c.add("not-linearizable", fmt.Sprintf("tag %s: no linearization from any of %v (floor, largest value); the shortest failing stretch ends with",
					showTag(tag), state), shortestIllegal(model, piece, max(left, time.Second))...)
			case porcupine.Unknown:
				if result == porcupine.Ok {
					result = porcupine.Unknown
				}
			}
			state = after(state, piece)
			piece = piece[:0]
		}
		for _, op := range ops {
			if len(piece) > 0 && op.Start > reach {
				check()
			}
			reach = max(reach, effectEnd(op))
			piece = append(piece, porcupine.Operation{ClientId: op.Client, Call: int64(op.Start), Return: int64(effectEnd(op)),
				Input:  tagInput{kind: op.Kind, v: op.N},
				Output: tagOutput{first: op.First, last: op.Last, null: op.Nil, unknown: op.Outcome == Unknown}, Metadata: op})
		}
		check()
		c.v.Porcupine[tag] = result
	}
}

// after returns the states a checked piece may leave, from before: the
// largest value acknowledged, with the floor of any SET that may have come
// last (none ended before another acknowledged one started), and the floors
// before when no acknowledged SET certainly took effect. (A SET whose
// outcome is unknown is taken to take effect before its error answered, or
// before effectEnd when nothing answered, or never.)
func after(before []tagState, piece []porcupine.Operation) []tagState {
	var issued int64
	var sets []*Op
	for _, o := range piece {
		switch op := o.Metadata.(*Op); {
		case op.Kind == KSet:
			sets = append(sets, op)
		case isAlloc(op.Kind):
			issued = max(issued, op.Last)
		}
	}
	floors := map[int64]bool{}
	acked := false
	for _, w := range sets {
		last := true
		for _, x := range sets {
			if x.Outcome == OK && x.Start > effectEnd(w) {
				last = false
			}
		}
		if last {
			floors[w.N] = true
		}
		acked = acked || w.Outcome == OK
	}
	var out []tagState
	for _, s := range before {
		issued = max(issued, s.issued)
		if !acked {
			floors[s.floor] = true
		}
	}
	for f := range floors {
		out = append(out, tagState{f, issued})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].floor < out[j].floor })
	return out
}

// shortestIllegal finds, by bisection, the shortest prefix (by call time)
// of an illegal history that is still illegal, and returns its last ops and
// every acknowledged SET in it that a later op could contradict.
func shortestIllegal(model porcupine.Model, hist []porcupine.Operation, timeout time.Duration) []*Op {
	sorted := slices.Clone(hist)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	illegal := func(n int) bool {
		return porcupine.CheckOperationsTimeout(model, sorted[:n], timeout) == porcupine.Illegal
	}
	// Gallop from the start (a violation early in a long history is found
	// on a short prefix, cheaply), then bisect.
	lo, hi := 1, len(sorted) // hi is illegal
	for n := 64; n < len(sorted); n *= 2 {
		if illegal(n) {
			hi = n
			break
		}
		lo = n + 1
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if illegal(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	prefix := sorted[:hi]
	last := prefix[len(prefix)-1].Metadata.(*Op)
	var out []*Op
	var topSet *Op
	for _, o := range prefix {
		op := o.Metadata.(*Op)
		if op.Kind == KSet && op.Outcome == OK && op.End < last.Start && (topSet == nil || op.N > topSet.N) {
			topSet = op
		}
	}
	if topSet != nil {
		out = append(out, topSet)
	}
	for _, o := range prefix[max(0, len(prefix)-6):] {
		if op := o.Metadata.(*Op); op != topSet {
			out = append(out, op)
		}
	}
	return out
}

// removedSkew is how long after its removal was seen a removed process
// may still answer: its lease ended long before (it was cut off for
// --dead-member-after), and the members' clocks may differ by a second.
const removedSkew = time.Second

// afterRemoval: a process the cluster removed while it ran, cut off, hands
// out nothing once its lease has ended (IDs, and buffered segment values
// too): no value from it for a request sent after its removal was seen.
func (c *checker) afterRemoval() {
	for _, r := range c.h.Removals {
		for _, op := range c.h.Ops {
			if op.Proc != r.Proc || !ok(op) || op.Start < r.At+removedSkew {
				continue
			}
			if op.Kind == KNextID || op.Kind == KGeneID || isAlloc(op.Kind) {
				c.add("issued-after-removal", fmt.Sprintf("%s was removed by the cluster while cut off (seen at %s, its lease ended before) and still handed out a value", r.NodeID, fmtDur(r.At)), op)
			}
		}
	}
}
