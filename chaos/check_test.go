package chaos

import (
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// alloc is an acknowledged INCRBY of [first, last] on node over [start, end] ms.
func alloc(node, tag string, first, last int64, start, end int) *Op {
	return &Op{Kind: KIncrBy, Node: node, Key: tag, N: last - first + 1, First: first, Last: last, Start: ms(start), End: ms(end)}
}

func ids(kind Kind, node string, start, end int, v ...int64) *Op {
	return &Op{Kind: kind, Node: node, Key: "7", N: int64(len(v)), IDs: v, Start: ms(start), End: ms(end)}
}

func set(tag string, v int64, out Outcome, start, end int) *Op {
	op := &Op{Kind: KSet, Key: tag, N: v, Outcome: out, Start: ms(start), End: ms(end)}
	if out == Refused {
		op.Err = "-ERR values never go back"
	}
	return op
}

// timedOut is op with no reply: its client gave up waiting.
func timedOut(op *Op) *Op { op.Err = "read tcp: i/o timeout"; return op }

// failed is op answered with an error that leaves its outcome unknown.
func failed(op *Op) *Op {
	op.Err = "-CLUSTERDOWN not confirmed by every member: SET x 500 (committed)"
	return op
}

// TestCheckerFindsEachAnomaly: each broken promise, in a history of a few
// ops, is found under its kind, and a clean history gives none.
func TestCheckerFindsEachAnomaly(t *testing.T) {
	clean := []*Op{
		ids(KNextID, "a", 0, 1, 10, 11), ids(KNextID, "a", 2, 3, 12), ids(KNextID, "b", 0, 5, 5),
		ids(KGeneID, "a", 0, 1, 256+7), ids(KGeneID, "a", 2, 3, 512+7),
		alloc("a", "x", 1, 10, 0, 1), alloc("b", "x", 1001, 1005, 0, 1), alloc("a", "x", 11, 20, 2, 3),
		set("x", 2000, OK, 4, 5), alloc("a", "x", 2001, 2001, 6, 7),
		set("x", 5, Refused, 8, 9), // below 2001: refused rightly
		{Kind: KGet, Key: "x", Last: 3000, Start: ms(10), End: ms(11)},
		{Kind: KNextID, Slot: 0, Err: "-CLOCKBACK clock is 5 ms behind issued IDs", Outcome: Refused, Start: ms(30), End: ms(31)},
		// Node c's clock went back and it took a fresh worker ID: its
		// order restarts with the new worker.
		ids(KNextID, "c", 0, 1, 1000<<22|1<<12|3), ids(KNextID, "c", 2, 3, 500<<22|2<<12|4),
	}
	cases := []struct {
		kind string
		ops  []*Op
	}{
		{"", nil},
		{"duplicate-id", []*Op{ids(KNextID, "a", 0, 1, 10), ids(KGeneID, "b", 0, 1, 10)}},
		{"duplicate-id-forgotten", []*Op{ids(KNextID, "a", 0, 1, 10), {Kind: KNextID, Node: "b", IDs: []int64{10}, Ghost: "forgotten"}}},
		{"id-order", []*Op{ids(KNextID, "a", 0, 1, 10), ids(KNextID, "a", 2, 3, 9)}},
		{"id-order", []*Op{ids(KNextID, "a", 0, 1, 10, 9)}},
		{"id-order", []*Op{ids(KNextID, "c", 0, 1, 1000<<22|1<<12|3), ids(KNextID, "c", 2, 3, 500<<22|1<<12|4)}},
		{"gene-order", []*Op{ids(KGeneID, "a", 0, 1, 512+7), ids(KGeneID, "a", 2, 3, 256+7)}},
		{"duplicate-value", []*Op{alloc("a", "x", 1, 10, 0, 1), alloc("b", "x", 10, 12, 0, 1)}},
		// Tags are their bytes: these two differ, and a duplicate on a
		// name that is not valid UTF-8 is counted apart (known open).
		{"", []*Op{alloc("a", "a\xff", 1, 10, 0, 1), alloc("b", "a\xfe", 1, 10, 0, 1), alloc("a", "\x00\r\n ", 1, 10, 0, 1), alloc("b", "\x00\r\n", 1, 10, 0, 1)}},
		{"duplicate-value", []*Op{alloc("a", "\x00\r\n ", 1, 10, 0, 1), alloc("b", "\x00\r\n ", 10, 12, 0, 1)}},
		{"duplicate-value" + invalidUTF8Tag, []*Op{alloc("a", "a\xff", 1, 10, 0, 1), alloc("b", "a\xff", 10, 12, 0, 1)}},
		{"value-order", []*Op{alloc("a", "y", 100, 110, 0, 1), alloc("a", "y", 50, 60, 2, 3)}},
		{"below-floor", []*Op{set("z", 500, OK, 0, 1), alloc("b", "z", 400, 400, 2, 3)}},
		{"set-lowered", []*Op{alloc("a", "w", 1, 100, 0, 1), {Kind: KSet, Key: "w", N: 50, Lower: true, Start: ms(2), End: ms(3)}}},
		{"set-refused", []*Op{alloc("a", "v", 1, 100, 0, 1), set("v", 500, Refused, 2, 3)}},
		{"stale-get", []*Op{alloc("a", "u", 1, 100, 0, 1), {Kind: KGet, Key: "u", Last: 50, Start: ms(2), End: ms(3)}}},
		{"not-linearizable", []*Op{alloc("a", "u", 1, 100, 0, 1), {Kind: KGet, Key: "u", Last: 50, Start: ms(2), End: ms(3)}}},
		// A SET acknowledged below a value issued before it, which no
		// simpler check looks for.
		{"not-linearizable", []*Op{alloc("a", "s", 12, 12, 0, 1), set("s", 10, OK, 2, 3)}},
		{"clockback", []*Op{{Kind: KNextID, Slot: 1, Err: "-CLOCKBACK clock is 5 ms behind issued IDs", Outcome: Refused, Start: ms(30), End: ms(31)}}},
	}
	// A SET meant to lower, answered OK below an earlier floor but above
	// every value issued, is allowed (docs/commands.md, SET).
	lowerFloor := &History{}
	for _, op := range []*Op{alloc("a", "f", 1, 100, 0, 1), set("f", 5000, OK, 2, 3), {Kind: KSet, Key: "f", N: 3000, Lower: true, Start: ms(4), End: ms(5)}} {
		lowerFloor.addOp(op)
	}
	if v := Check(lowerFloor, 8, time.Second); len(v.Anomalies) != 0 {
		t.Errorf("a SET below a floor but above every issued value: %s", v.Anomalies[0].Report(0))
	}
	// After the cluster accepted a mistake, anomalies are told apart.
	h := &History{Membership: []Anomaly{{Kind: "membership", At: ms(1)}}}
	h.addOp(ids(KNextID, "a", 0, 1, 10))
	h.addOp(ids(KNextID, "b", 2, 3, 10))
	if v := Check(h, 8, time.Second); v.Counts["duplicate-id"+afterMistake] != 1 || v.Counts["membership"] != 1 {
		t.Errorf("after an accepted mistake: %v", v.Counts)
	}
	for _, tc := range cases {
		h := &History{Clocks: []clockChange{{Slot: 0, At: ms(20), From: 0, To: -ms(100)}}}
		for _, op := range append(append([]*Op{}, clean...), tc.ops...) {
			cp := *op
			h.addOp(&cp)
		}
		v := Check(h, 8, 10*time.Second)
		if tc.kind == "" {
			if len(v.Anomalies) != 0 {
				t.Errorf("clean history: %v", v.Anomalies[0].Report(0))
			}
			continue
		}
		if v.Counts[tc.kind] == 0 {
			t.Errorf("%s not found; found %v", tc.kind, v.Counts)
		}
		if why := excused(tc.kind, v.Counts); why != "" {
			t.Errorf("%s excused as %q", tc.kind, why)
		}
	}
}

// TestCheckerAllowsWhatALoweringSetExplains: SET may lower a tag below
// values reserved but never issued, so a value below an earlier SET's
// floor is fine when another SET, which may linearize between them, set
// the tag below it; so is a refusal naming a node restarted since it was
// given values. Without those, the same values are anomalies.
func TestCheckerAllowsWhatALoweringSetExplains(t *testing.T) {
	refusedRestarted := set("r", 100, Refused, 6, 7)
	refusedRestarted.Err = "-ERR values never go back: r: node n2 was given values up to 1000 and has restarted or left since, so it may have issued them"
	cases := []struct {
		name   string
		ops    []*Op
		faults []*FaultEvent
		want   string // the anomaly expected, "" for none
	}{
		{"SET 1000, then SET 500, then 501", []*Op{
			set("x", 1000, OK, 0, 1), set("x", 500, OK, 2, 3), alloc("a", "x", 501, 501, 4, 5)}, nil, ""},
		{"SET 1000 and SET 500 concurrent, then 501", []*Op{
			set("x", 1000, OK, 0, 3), set("x", 500, OK, 1, 4), alloc("a", "x", 501, 501, 5, 6)}, nil, ""},
		{"SET 1000, SET 500 unknown, then 501", []*Op{
			set("x", 1000, OK, 0, 1), set("x", 500, Unknown, 2, 3), alloc("a", "x", 501, 501, 4, 5)}, nil, ""},
		{"SET 500, then SET 1000, then 501", []*Op{
			set("x", 500, OK, 0, 1), set("x", 1000, OK, 2, 3), alloc("a", "x", 501, 501, 4, 5)}, nil, "below-floor"},
		{"SET 1000, then SET 500, then GET 500", []*Op{
			set("x", 1000, OK, 0, 1), set("x", 500, OK, 2, 3), {Kind: KGet, Key: "x", Last: 500, Start: ms(4), End: ms(5)}}, nil, ""},
		// A SET its client gave up on after 3 s may still be at work on
		// the server (waiting out a removed member's lease, say) and land
		// after a SET acknowledged later; one the server answered with an
		// error cannot, nor one sent longer ago than the server works on it.
		{"SET 500 timed out, then SET 1000, then GET 500", []*Op{
			timedOut(set("x", 500, Unknown, 0, 3000)), set("x", 1000, OK, 3100, 3200),
			{Kind: KGet, Key: "x", Last: 500, Start: ms(3300), End: ms(3301)}}, nil, ""},
		{"SET 500 failed, then SET 1000, then GET 500", []*Op{
			failed(set("x", 500, Unknown, 0, 3000)), set("x", 1000, OK, 3100, 3200),
			{Kind: KGet, Key: "x", Last: 500, Start: ms(3300), End: ms(3301)}}, nil, "stale-get"},
		{"SET 500 timed out long ago, then SET 1000, then GET 500", []*Op{
			timedOut(set("x", 500, Unknown, 0, 3000)), set("x", 1000, OK, 20000, 20001),
			{Kind: KGet, Key: "x", Last: 500, Start: ms(20002), End: ms(20003)}}, nil, "stale-get"},
		{"refused naming a restarted node, after a kill", []*Op{alloc("a", "r", 1, 10, 0, 1), refusedRestarted},
			[]*FaultEvent{{Kind: FKill, Start: ms(2), End: ms(3)}}, ""},
		{"refused naming a restarted node, no restart", []*Op{alloc("a", "r", 1, 10, 0, 1), refusedRestarted}, nil, "set-refused"},
	}
	for _, tc := range cases {
		h := &History{Faults: tc.faults}
		for _, op := range tc.ops {
			cp := *op
			h.addOp(&cp)
		}
		v := Check(h, 8, 10*time.Second)
		switch {
		case tc.want == "" && len(v.Anomalies) != 0:
			t.Errorf("%s: %v", tc.name, v.Anomalies[0].Report(0))
		case tc.want != "" && v.Counts[tc.want] == 0:
			t.Errorf("%s: %s not found; found %v", tc.name, tc.want, v.Counts)
		}
	}
}
