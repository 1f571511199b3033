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
		{"two healthy voters left are not cut to one", 5,
			[]server{{"a", L, true, ""}, {"b", V, true, ""}}, time.Minute, "[]", "[]", 2},
		{"a failed voter is replaced by a healthy non-voter", 3,
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
			s := stateOf(tc.servers, tc.stable)
			ch := voterPromoter{max: tc.max}.CalculatePromotionsAndDemotions(conf, s)
			if got := ids(ch.Promotions); got != tc.promote {
				t.Errorf("promotions %s, want %s", got, tc.promote)
			}
			if got := ids(ch.Demotions); got != tc.demote {
				t.Errorf("demotions %s, want %s", got, tc.demote)
			}
			voters := 0
			for _, srv := range tc.servers {
				voters++
				for _, d := range ch.Demotions {
					if string(d) == srv.id {
						voters--
					}
				}
				if srv.state == N {
					voters--
					for _, p := range ch.Promotions {
						if string(p) == srv.id {
							voters++
						}
					}
				}
			}
			if voters != tc.wantVoters {
				t.Errorf("%d voters after the changes, want %d", voters, tc.wantVoters)
			}
		})
	}
}
