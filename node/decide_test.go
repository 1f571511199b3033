package node

import "testing"

// TestDecideHowAStartBegins: the directory and the flags decide how a
// start begins, and the probe of the other --join addresses is made only
// for the first of a --join list on an empty directory.
func TestDecideHowAStartBegins(t *testing.T) {
	const join = "10.0.0.1:6380,10.0.0.2:6380"
	others := []string{"10.0.0.2:6380"}
	for _, tc := range []struct {
		name    string
		facts   startFacts
		join    string
		answers bool // what the probe of the other addresses finds
		want    startPlan
		probed  bool
	}{
		{name: "empty directory, no --join", want: startPlan{kind: startBootstrap}},
		{name: "empty directory, --join", facts: startFacts{joinAddrs: others}, join: join,
			want: startPlan{kind: startJoin, join: join, joins: true}},
		{name: "first of a StatefulSet, nobody answers", facts: startFacts{joinAddrs: others, firstOfJoin: true}, join: join,
			want: startPlan{kind: startFirstOfSet, join: join}, probed: true},
		{name: "first of a StatefulSet replaced, its peers answer", facts: startFacts{joinAddrs: others, firstOfJoin: true}, join: join, answers: true,
			want: startPlan{kind: startJoin, join: join, joins: true}, probed: true},
		{name: "restart", facts: startFacts{clusterID: "c1"}, want: startPlan{kind: startRestart}},
		{name: "restart with --join", facts: startFacts{clusterID: "c1", joinAddrs: others, firstOfJoin: true}, join: join,
			want: startPlan{kind: startRestart, join: join, joins: true}},
		{name: "restored copy", facts: startFacts{clusterID: "c1", copied: "marker differs"},
			want: startPlan{kind: startRestoredCopy, copied: "marker differs"}},
		{name: "removed, moved aside, --join", facts: startFacts{movedAside: true, joinAddrs: others, firstOfJoin: true, noteJoin: "10.0.0.3:6380"}, join: join,
			want: startPlan{kind: startRejoin, join: join, joins: true}},
		{name: "removed, moved aside, no --join, members recorded", facts: startFacts{movedAside: true, noteJoin: "10.0.0.3:6380"},
			want: startPlan{kind: startRejoin, join: "10.0.0.3:6380", joins: true}},
		{name: "removed, moved aside, nobody to join through", facts: startFacts{movedAside: true},
			want: startPlan{kind: startRefused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probed := false
			tc.facts.peersAnswer = func() bool { probed = true; return tc.answers }
			got := decide(tc.facts, tc.join)
			if got != tc.want {
				t.Errorf("decide: %+v (%v), want %+v (%v)", got, got.kind, tc.want, tc.want.kind)
			}
			if probed != tc.probed {
				t.Errorf("probed the other --join addresses: %v, want %v", probed, tc.probed)
			}
		})
	}
}
