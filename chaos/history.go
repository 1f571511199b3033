package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is an operation's command.
type Kind uint8

// The operations clients issue.
const (
	KNextID Kind = iota
	KGeneID
	KIncr
	KIncrBy
	KNextSeg
	KSet
	KGet
	// KExec is a MULTI ... EXEC: its queued commands are ops of their own
	// kinds, with the transaction's number in Tx.
	KExec
	// KDiscard is a MULTI ... DISCARD: nothing it queued may run.
	KDiscard
	numKinds
)

var kindNames = [...]string{"NEXTID", "GENEID", "INCR", "INCRBY", "NEXTSEG", "SET", "GET", "EXEC", "DISCARD"}

func (k Kind) String() string { return kindNames[k] }

// Outcome is what a client knows of an operation.
type Outcome uint8

const (
	// OK: the reply was a value (or +OK), recorded in the op.
	OK Outcome = iota
	// Refused: an error reply that says nothing took effect.
	Refused
	// Unknown: no reply in time, the connection broke, or an error reply
	// after which the command may still have taken effect (SET).
	Unknown
)

func (o Outcome) String() string { return [...]string{"ok", "refused", "unknown"}[o] }

// Op is one command as a client saw it. Times are since the campaign's start.
type Op struct {
	Index   int
	Client  int
	Slot    int    // node slot the client talked to
	Node    string // node ID of the process that answered
	Proc    int    // process incarnation (counts starts, per campaign)
	Conn    int64  // client connection
	Kind    Kind
	Key     string // tag or buyer
	N       int64  // count, increment, segment size, or SET value
	Lower   bool   // a SET meant to lower the tag: must be refused
	Start   time.Duration
	End     time.Duration
	Outcome Outcome
	Err     string
	IDs     []int64 // NEXTID, GENEID
	First   int64   // INCR/INCRBY/NEXTSEG range; GET value in Last
	Last    int64
	Nil     bool // GET answered nil
	// Tx numbers a transaction: its EXEC (or DISCARD) and the commands it
	// queued share it; 0 outside one.
	Tx int64
	// Ghost says the process was outside the cluster by the nemesis's
	// doing: "forgotten" (FORGET while it ran) or "wrong-layout" (a joiner
	// the cluster should have refused).
	Ghost string
}

func (o *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d [%s..%s] c%d slot%d node=%s proc=%d conn=%d %s", o.Index, fmtDur(o.Start), fmtDur(o.End),
		o.Client, o.Slot, o.Node, o.Proc, o.Conn, o.Kind)
	if o.Ghost != "" {
		b.WriteString(" (" + o.Ghost + " node)")
	}
	if o.Tx != 0 && o.Kind != KExec && o.Kind != KDiscard {
		fmt.Fprintf(&b, " (in tx %d)", o.Tx)
	}
	switch o.Kind {
	case KExec, KDiscard:
		fmt.Fprintf(&b, " tx %d of %d commands", o.Tx, o.N)
	case KNextID:
		fmt.Fprintf(&b, " %d", o.N)
	case KGeneID:
		fmt.Fprintf(&b, " %s %d", o.Key, o.N)
	case KIncr, KGet:
		fmt.Fprintf(&b, " %s", showTag(o.Key))
	default:
		fmt.Fprintf(&b, " %s %d", showTag(o.Key), o.N)
	}
	if o.Lower {
		b.WriteString(" (lowering)")
	}
	b.WriteString(" -> ")
	switch {
	case o.Outcome != OK:
		fmt.Fprintf(&b, "%s %q", o.Outcome, o.Err)
	case o.Kind == KNextID || o.Kind == KGeneID:
		if len(o.IDs) <= 4 {
			fmt.Fprintf(&b, "%v", o.IDs)
		} else {
			fmt.Fprintf(&b, "[%d .. %d] (%d IDs)", o.IDs[0], o.IDs[len(o.IDs)-1], len(o.IDs))
		}
	case o.Kind == KSet || o.Kind == KExec || o.Kind == KDiscard:
		b.WriteString("OK")
	case o.Kind == KGet && o.Nil:
		b.WriteString("(nil)")
	case o.Kind == KGet:
		fmt.Fprintf(&b, "%d", o.Last)
	default:
		fmt.Fprintf(&b, "[%d, %d]", o.First, o.Last)
	}
	return b.String()
}

// showTag is a tag as reports print it: as it is when it is printable
// ASCII without spaces, else quoted as Go quotes strings.
func showTag(tag string) string {
	for i := 0; i < len(tag); i++ {
		if tag[i] <= ' ' || tag[i] > '~' || tag[i] == '"' {
			return strconv.Quote(tag)
		}
	}
	return tag
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func fmtDur(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// FaultEvent is one fault as the nemesis injected it.
type FaultEvent struct {
	Kind   string
	Slots  []int
	Start  time.Duration
	End    time.Duration
	Detail string
}

func (f *FaultEvent) String() string {
	return fmt.Sprintf("fault %s slots=%v [%s..%s] %s", f.Kind, f.Slots, fmtDur(f.Start), fmtDur(f.End), f.Detail)
}

// clockChange is a step of one node's clock, or a start resetting it to 0.
type clockChange struct {
	Slot     int
	At       time.Duration
	From, To time.Duration
}

// History is everything a campaign recorded.
type History struct {
	mu     sync.Mutex
	Ops    []*Op
	Faults []*FaultEvent
	Clocks []clockChange
	// Refusals the nemesis expected and did not get, or acceptances it
	// did not expect: recorded as anomalies by the checker.
	Membership []Anomaly
	// PowerCutPages counts the unsynced pages (4 KiB) power cuts dropped.
	PowerCutPages int
	// Removals are live processes the cluster removed (partition-removed):
	// from At on, each must hand out nothing (its lease ended before).
	Removals []removal
}

// removal is a process the cluster removed while it ran, cut off.
type removal struct {
	Proc   int
	NodeID string
	At     time.Duration // when the leader's member list first lacked it
}

func (h *History) addRemoval(r removal) {
	h.mu.Lock()
	h.Removals = append(h.Removals, r)
	h.mu.Unlock()
}

func (h *History) addPowerCut(pages int) {
	h.mu.Lock()
	h.PowerCutPages += pages
	h.mu.Unlock()
}

func (h *History) addOp(op *Op) {
	h.mu.Lock()
	op.Index = len(h.Ops)
	h.Ops = append(h.Ops, op)
	h.mu.Unlock()
}

func (h *History) addFault(f *FaultEvent) {
	h.mu.Lock()
	h.Faults = append(h.Faults, f)
	h.mu.Unlock()
}

func (h *History) addClock(c clockChange) {
	h.mu.Lock()
	h.Clocks = append(h.Clocks, c)
	h.mu.Unlock()
}

func (h *History) addMembership(a Anomaly) {
	h.mu.Lock()
	h.Membership = append(h.Membership, a)
	h.mu.Unlock()
}

// faultsAround lists the faults that overlap [from, to], with a margin.
func (h *History) faultsAround(from, to time.Duration) []*FaultEvent {
	var out []*FaultEvent
	for _, f := range h.Faults {
		if f.Start <= to+time.Second && f.End >= from-2*time.Second {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}
