package cluster

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// server is one member of a promoter test: its suffrage, health, zone.
type server struct {
	id      string
	state   autopilot.RaftState
	healthy bool
	zone    string
}

func stateOf(servers []server, stableFor time.Duration) *autopilot.State {
	s := &autopilot.State{Servers: map[raft.ServerID]*autopilot.ServerState{}}
	for _, srv := range servers {
		s.Servers[raft.ServerID(srv.id)] = &autopilot.ServerState{
			Server: autopilot.Server{ID: raft.ServerID(srv.id), Meta: map[string]string{"zone": srv.zone}},
			State:  srv.state,
			Health: autopilot.ServerHealth{Healthy: srv.healthy, StableSince: time.Now().Add(-stableFor)},
		}
	}
	return s
}

func ids(list []raft.ServerID) string {
	out := make([]string, len(list))
	for i, id := range list {
		out[i] = string(id)
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

const (
	L = autopilot.RaftLeader
	V = autopilot.RaftVoter
	N = autopilot.RaftNonVoter
)

// TestPromoterKeepsAnOddCappedVoterSet: the promoter's changes for the
// cases that matter: growth (odd counts, up to the cap), a failed voter
// replaced by a healthy non-voter, no healthy voter demoted to make the
// count odd, an unstable non-voter left alone, and the cap enforced.
func TestPromoterKeepsAnOddCappedVoterSet(t *testing.T) {
	conf := &autopilot.Config{ServerStabilizationTime: time.Second}
	for _, tc := range []struct {
		name       string
		max        int
		servers    []server
		stable     time.Duration
		promote    string
		demote     string
		wantVoters int
	}{
		{"a second member stays a non-voter (one voter is as safe and commits alone)", 5,
			[]server{{"a", L, true, ""}, {"b", N, true, ""}}, time.Minute, "[]", "[]", 1},
		{"a third makes three voters", 5,
			[]server{{"a", L, true, ""}, {"b", N, true, ""}, {"c", N, true, ""}}, time.Minute, "[b c]", "[]", 3},
		{"a fourth stays a non-voter", 5,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}, {"c", V, true, ""}, {"d", N, true, ""}}, time.Minute, "[]", "[]", 3},
		{"two healthy voters left (after a FORGET) are cut to one: the other's failure then costs nothing", 5,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}}, time.Minute, "[]", "[b]", 1},
		{"four healthy voters left are cut to three", 5,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}, {"c", V, true, ""}, {"d", V, true, ""}}, time.Minute, "[]", "[d]", 3},
		{"a failed voter is replaced by a healthy non-voter, promoted before the other is demoted", 3,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}, {"c", V, false, ""}, {"d", N, true, ""}}, time.Minute, "[d]", "[c]", 3},
		{"a failed voter keeps its vote while nobody can take it", 3,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}, {"c", V, false, ""}, {"d", N, false, ""}}, time.Minute, "[]", "[]", 3},
		{"a non-voter not yet stable is not promoted", 5,
			[]server{{"a", L, true, ""}, {"b", N, true, ""}, {"c", N, true, ""}}, 0, "[]", "[]", 1},
		{"over the cap: the extra voters are demoted, the leader never", 3,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}, {"c", V, true, ""}, {"d", V, true, ""}, {"e", V, true, ""}}, time.Minute, "[]", "[d e]", 3},
		{"an even cap keeps one fewer", 4,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}, {"c", V, true, ""}, {"d", N, true, ""}}, time.Minute, "[]", "[]", 3},
		{"zones: five voters over three zones, never three in one", 5,
			[]server{{"a1", L, true, "a"}, {"a2", V, true, "a"}, {"a3", V, true, "a"}, {"b1", V, true, "b"}, {"b2", N, true, "b"},
				{"b3", N, true, "b"}, {"c1", V, true, "c"}, {"c2", N, true, "c"}, {"c3", N, true, "c"}}, time.Minute, "[b2]", "[a3]", 5},
		{"zones: a lost zone's voters are replaced from the others", 5,
			[]server{{"a1", V, false, "a"}, {"a2", V, false, "a"}, {"a3", N, false, "a"}, {"b1", L, true, "b"}, {"b2", V, true, "b"},
				{"b3", N, true, "b"}, {"c1", V, true, "c"}, {"c2", N, true, "c"}, {"c3", N, true, "c"}}, time.Minute, "[b3 c2]", "[a1 a2]", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Autopilot's rounds: each applies the changes of the one
			// before, until there are none.
			servers := append([]server(nil), tc.servers...)
			var promoted, demoted []raft.ServerID
			for round := 0; ; round++ {
				if round == 4 {
					t.Fatalf("still changing after %d rounds", round)
				}
				ch := voterPromoter{max: tc.max}.CalculatePromotionsAndDemotions(conf, stateOf(servers, tc.stable))
				if len(ch.Promotions) == 0 && len(ch.Demotions) == 0 {
					break
				}
				if len(ch.Promotions) > 0 && len(ch.Demotions) > 0 {
					t.Errorf("round %d promotes %s and demotes %s: demotions must wait for the promotions", round, ids(ch.Promotions), ids(ch.Demotions))
				}
				promoted, demoted = append(promoted, ch.Promotions...), append(demoted, ch.Demotions...)
				for i := range servers {
					for _, id := range ch.Promotions {
						if string(id) == servers[i].id {
							servers[i].state = V
						}
					}
					for _, id := range ch.Demotions {
						if string(id) == servers[i].id {
							servers[i].state = N
						}
					}
				}
			}
			if got := ids(promoted); got != tc.promote {
				t.Errorf("promotions %s, want %s", got, tc.promote)
			}
			if got := ids(demoted); got != tc.demote {
				t.Errorf("demotions %s, want %s", got, tc.demote)
			}
			voters := 0
			for _, srv := range servers {
				if srv.state != N {
					voters++
				}
			}
			if voters != tc.wantVoters {
				t.Errorf("%d voters after the changes, want %d", voters, tc.wantVoters)
			}
		})
	}
}

// TestNewLeaderInheritsSilences: a new leader counts each member's silence
// on from the later of what the leader before it reported (its view) and
// what this node saw when it last led, and leaves each member at least one
// autopilot interval; stale sources count for nothing.
func TestNewLeaderInheritsSilences(t *testing.T) {
	now := time.Now()
	p := &pilot{c: &Cluster{cfg: Config{NodeID: "n1", DeadMemberAfter: 12 * time.Second}, timing: Timing{Autopilot: 2 * time.Second}}}
	p.view.Store(&leaderView{at: now.Add(-time.Second), members: map[string]MemberHealth{
		"n1": {Node: "n1", LastContactMS: 0},
		"n2": {Node: "n2", LastContactMS: 500},
		"n4": {Node: "n4", LastContactMS: 20_000}, // before the floor: gets one interval
		"n5": {Node: "n5", LastContactMS: -1},
	}})
	p.led, p.ledHeard = now.Add(-3*time.Second), map[string]time.Time{"n2": now.Add(-5 * time.Second), "n3": now.Add(-7 * time.Second), "n4": now.Add(-11 * time.Second)}
	got := p.inherited(now)
	want := map[string]time.Time{
		"n2": now.Add(-1500 * time.Millisecond), // the view heard it later than this node's leadership
		"n3": now.Add(-7 * time.Second),         // only this node's last leadership knew it
		"n4": now.Add(-10 * time.Second),        // 12 s - one 2 s interval
	}
	if len(got) != len(want) {
		t.Fatalf("inherited %v, want %v", got, want)
	}
	for id, w := range want {
		if !got[id].Equal(w) {
			t.Errorf("%s: last heard %v before now, want %v", id, now.Sub(got[id]), now.Sub(w))
		}
	}
	// Stale sources (older than four intervals), or no removal at all:
	// nothing inherited.
	p.led = now.Add(-9 * time.Second)
	p.view.Store(&leaderView{at: now.Add(-9 * time.Second), members: map[string]MemberHealth{"n2": {LastContactMS: 0}}})
	if got := p.inherited(now); len(got) != 0 {
		t.Errorf("from stale sources: %v", got)
	}
	p.led = now
	p.c.cfg.DeadMemberAfter = 0
	if got := p.inherited(now); len(got) != 0 {
		t.Errorf("with DeadMemberAfter 0: %v", got)
	}
}

// TestRejoinerIsNotDeadForItsOldSilence: a member removed as dead and
// joining again under its node ID (its pod back on its volume) is not
// removed again for the silence the leader recorded before it was removed:
// its join is hearing from it.
func TestRejoinerIsNotDeadForItsOldSilence(t *testing.T) {
	now := time.Now()
	p := &pilot{c: &Cluster{cfg: Config{NodeID: "n1", DeadMemberAfter: 3 * time.Second}},
		heard: map[string]time.Time{"n2": now.Add(-20 * time.Second)}, joining: map[string]joiner{}}
	p.join("n2", "127.0.0.1:1")
	p.joined("n2")
	if silent := p.silentFor("n2", time.Now()); silent >= p.c.cfg.DeadMemberAfter {
		t.Fatalf("n2, joining again, is silent for %v: dead at once (after %v)", silent, p.c.cfg.DeadMemberAfter)
	}
}
