package cluster

// Autopilot: membership that runs itself, with hashicorp/raft-autopilot as
// Consul and Nomad use it. The leader runs it; this file is its delegate
// (what the library asks of the application: the members, their health,
// removing a dead one) and its promoter (which members vote).
//
//   - At most Config.Voters voters, an odd number, spread over zones; every
//     other member a Raft non-voter, which serves clients exactly as a
//     voter does (it forwards to the leader what needs the leader).
//   - A member the leader has not heard from for Config.DeadMemberAfter is
//     failed: autopilot removes it as FORGET does (forget), never below
//     the quorum floor (MinQuorum) nor more than a minority at once.
//   - A failed or lagging voter is replaced by a healthy non-voter (the
//     other is promoted, then it is demoted) long before it is removed.

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// DefaultVoters is --voters: five voters survive two failures, and each
// commit waits for three of them.
const DefaultVoters = 5

// DefaultDeadMemberAfter is --dead-member-after. A restart takes seconds
// and a pod recreated by its StatefulSet (with its volume) comes back in
// well under a minute, so neither is a death; a member gone for two minutes
// is most likely gone for good. Nothing waits on the delay in a rolling
// replacement (a new node at a dead member's address replaces it at once,
// Join), nor for the quorum (a failed voter is replaced by a non-voter
// within seconds); what it bounds is how long a SET, which every member
// must confirm, and the dead member's worker ID wait for it.
const DefaultDeadMemberAfter = 2 * time.Minute

// pilot is this node's autopilot delegate. Its maps are about the current
// leadership, except that a new leader starts from the silences the leader
// before it saw (inherited).
type pilot struct {
	c    *Cluster
	ap   *autopilot.Autopilot
	conf autopilot.Config

	steerMu sync.Mutex // running, closed; held across autopilot's Start and Stop
	running bool
	closed  bool

	mu       sync.Mutex
	since    time.Time            // when this node's autopilot started (its leadership)
	heard    map[string]time.Time // last answer to a stats request
	led      time.Time            // when this node's last leadership ended
	ledHeard map[string]time.Time // heard, as it was then
	builds   map[string]build     // each member's version and commit, from its last answer
	removing map[string]bool      // a removal in flight
	removals sync.WaitGroup       // the removals' goroutines (Cluster.Close waits for them)
	kept     map[string]bool      // dead members whose keeping this leadership logged
	joining  map[string]joiner    // in the Raft configuration, not yet in the state machine

	state atomic.Pointer[autopilot.State] // the leader's latest view
	view  atomic.Pointer[leaderView]      // a follower's copy of the leader's view
}

// build is a member's version and commit, as it last answered them.
type build struct{ version, commit string }

type joiner struct {
	raftAddr string
	at       time.Time
}

// MemberHealth is one member's health as the leader's autopilot sees it.
type MemberHealth struct {
	Node          string `json:"node"`
	Healthy       bool   `json:"healthy"`
	Status        string `json:"status"`          // alive, failed or left (autopilot.NodeStatus)
	LastContactMS int64  `json:"last_contact_ms"` // since the leader last heard from it; -1: never this leadership
	// Version and Commit are the member's build, from its last answer to
	// the leader; empty when it has not answered, or is older than the
	// field.
	Version string `json:"version,omitempty"`
	Commit  string `json:"commit,omitempty"`
	// LastIndex is the last entry of the member's Raft log, from its last
	// answer to the leader; 0 when it has not answered.
	LastIndex uint64 `json:"last_index,omitempty"`
}

// leaderView is the leader's health of every member, as a follower got it
// with the leader's last stats request.
type leaderView struct {
	members map[string]MemberHealth
	at      time.Time
}

// memberStats is a member's answer to the leader's stats request.
type memberStats struct {
	LastContactMS int64  `json:"last_contact_ms"` // since it last heard from the leader; -1: never
	LastIndex     uint64 `json:"last_index"`
	LastTerm      uint64 `json:"last_term"`
	Version       string `json:"version,omitempty"` // Config.Version; absent from a member older than the field
	Commit        string `json:"commit,omitempty"`
}

// newPilot sets autopilot up for c; it runs only while c leads.
func newPilot(c *Cluster, hlog hclog.Logger) *pilot {
	t := c.timing
	p := &pilot{c: c, heard: map[string]time.Time{}, builds: map[string]build{}, removing: map[string]bool{}, kept: map[string]bool{}, joining: map[string]joiner{}}
	p.conf = autopilot.Config{
		CleanupDeadServers: c.cfg.DeadMemberAfter > 0,
		// A follower hears from the leader every tenth of a heartbeat
		// timeout; two election timeouts without is a member that lags.
		LastContactThreshold: 2 * t.Election,
		MaxTrailingLogs:      500,
		// Removal never leaves fewer potential voters than this: a cluster
		// of three survives a failure, and never shrinks itself below that.
		MinQuorum:               uint(min(c.cfg.Voters, 3)),
		ServerStabilizationTime: t.Autopilot,
	}
	p.ap = autopilot.New(c.raft, p, autopilot.WithLogger(hlog), autopilot.WithPromoter(voterPromoter{max: c.cfg.Voters}),
		// The state is updated twice per reconcile, so that a reconcile
		// sees the changes the one before it made.
		autopilot.WithUpdateInterval(t.Autopilot), autopilot.WithReconcileInterval(2*t.Autopilot))
	return p
}

// steer runs autopilot while this node leads, and stops it when it does not.
// Autopilot calls the delegate from Start: p.mu is not held across it.
func (p *pilot) steer(leader bool) {
	p.steerMu.Lock()
	defer p.steerMu.Unlock()
	switch {
	case p.closed:
	case leader && !p.running:
		p.running = true
		p.mu.Lock()
		p.since = time.Now()
		p.heard = p.inherited(p.since)
		p.kept = map[string]bool{}
		p.mu.Unlock()
		p.ap.Start(context.Background())
		p.c.log.Info("autopilot started", "voters", p.c.cfg.Voters, "dead_member_after", p.c.cfg.DeadMemberAfter.String())
	case !leader && p.running:
		p.running = false
		p.ap.Stop()
		p.state.Store(nil)
		p.mu.Lock()
		p.led, p.ledHeard = time.Now(), maps.Clone(p.heard)
		p.mu.Unlock()
	}
}

// inherited is when each member was last heard from, as the leader before
// this one saw it (its view came with its last stats request, if recent),
// or as this node saw it when it last led (if recent: a leader that loses
// its leadership for a moment often wins it back, and gets no view from
// itself), whichever heard it later: a new leader counts on from there, or
// leaders that change more often than DeadMemberAfter would never remove
// a dead member (each would give it the full delay again). Each member
// still gets at least one autopilot interval with this leader before it
// counts as failed, so one this leader reaches is heard from first: the
// earlier leader may have been the one cut off. Caller holds p.mu.
func (p *pilot) inherited(now time.Time) map[string]time.Time {
	heard := map[string]time.Time{}
	fresh := 4 * p.c.timing.Autopilot
	if p.c.cfg.DeadMemberAfter <= 0 {
		return heard
	}
	if v := p.view.Load(); v != nil && now.Sub(v.at) <= fresh {
		for id, h := range v.members {
			if h.LastContactMS >= 0 {
				heard[id] = v.at.Add(-time.Duration(h.LastContactMS) * time.Millisecond)
			}
		}
	}
	if !p.led.IsZero() && now.Sub(p.led) <= fresh {
		for id, t := range p.ledHeard {
			if t.After(heard[id]) {
				heard[id] = t
			}
		}
	}
	delete(heard, p.c.cfg.NodeID)
	floor := now.Add(-p.c.cfg.DeadMemberAfter + p.c.timing.Autopilot)
	for id, t := range heard {
		if t.Before(floor) {
			heard[id] = floor
		}
	}
	return heard
}

// stop ends autopilot for good and waits for it.
func (p *pilot) stop() {
	p.steerMu.Lock()
	p.running, p.closed = false, true
	done := p.ap.Stop()
	p.steerMu.Unlock()
	<-done
}

// join tells autopilot that node enters the Raft configuration before the
// state machine has it, so that it is not taken for a stray, and that it
// was heard from now: a member removed and joining again under its node ID
// is not dead for its old silence.
func (p *pilot) join(node, raftAddr string) {
	p.mu.Lock()
	p.joining[node] = joiner{raftAddr: raftAddr, at: time.Now()}
	p.heard[node] = time.Now()
	p.mu.Unlock()
}

func (p *pilot) joined(node string) {
	p.mu.Lock()
	delete(p.joining, node)
	p.mu.Unlock()
}

// AutopilotConfig implements autopilot.ApplicationIntegration.
func (p *pilot) AutopilotConfig() *autopilot.Config {
	conf := p.conf
	return &conf
}

// KnownServers implements autopilot.ApplicationIntegration: the members of
// the state machine, each alive unless not heard from for DeadMemberAfter,
// this node, and the joiners in flight. A server of the Raft configuration
// that is none of these is a stray (a join cut short, a FORGET half done):
// autopilot removes it.
func (p *pilot) KnownServers() map[raft.ServerID]*autopilot.Server {
	c := p.c
	now := time.Now()
	out := map[raft.ServerID]*autopilot.Server{}
	p.mu.Lock()
	defer p.mu.Unlock()
	add := func(id, raftAddr, zone string, status autopilot.NodeStatus) {
		out[raft.ServerID(id)] = &autopilot.Server{ID: raft.ServerID(id), Name: id, Address: raft.ServerAddress(raftAddr),
			NodeStatus: status, NodeType: autopilot.NodeVoter, Meta: map[string]string{"zone": zone}, RaftVersion: 3,
			IsLeader: id == c.cfg.NodeID}
	}
	for id, m := range *c.fsm.members.Load() {
		if _, seen := p.heard[id]; !seen {
			p.heard[id] = now // a member first seen now (it just joined) gets the full delay too
		}
		status := autopilot.NodeAlive
		if id != c.cfg.NodeID && p.silentFor(id, now) > c.cfg.DeadMemberAfter && c.cfg.DeadMemberAfter > 0 {
			status = autopilot.NodeFailed
		}
		add(id, m.RaftAddr, m.Zone, status)
	}
	if _, ok := out[raft.ServerID(c.cfg.NodeID)]; !ok {
		add(c.cfg.NodeID, c.RaftAddr(), c.cfg.Zone, autopilot.NodeAlive)
	}
	for id, j := range p.joining {
		if now.Sub(j.at) > c.timing.Call {
			delete(p.joining, id) // its join ended one way or the other
			continue
		}
		if _, ok := out[raft.ServerID(id)]; !ok {
			add(id, j.raftAddr, "", autopilot.NodeAlive)
		}
	}
	return out
}

// silentFor is how long the leader has not heard from node: since its last
// answer, or since this leader first knew it (its leadership began, or the
// node joined since). Caller holds p.mu.
func (p *pilot) silentFor(node string, now time.Time) time.Duration {
	last, ok := p.heard[node]
	if !ok {
		last = p.since
	}
	return now.Sub(last)
}

// FetchServerStats implements autopilot.ApplicationIntegration: each member
// answers a stats request on the internal channel (the request carries the
// leader's view of every member's health, for the member's CLUSTER INFO).
// A member that does not answer gets stats that are unhealthy at once.
func (p *pilot) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	c := p.c
	view := p.healthList()
	out := make(map[raft.ServerID]*autopilot.ServerStats, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, srv := range servers {
		if string(id) == c.cfg.NodeID {
			st := c.localStats()
			mu.Lock()
			out[id] = &autopilot.ServerStats{LastContact: 0, LastIndex: st.LastIndex, LastTerm: st.LastTerm}
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats := &autopilot.ServerStats{LastContact: -1}
			resp, err := c.call(ctx, string(srv.Address), &request{Op: opStats, Node: string(id), View: view})
			if err == nil && resp.Stats != nil {
				stats.LastIndex, stats.LastTerm = resp.Stats.LastIndex, resp.Stats.LastTerm
				stats.LastContact = time.Duration(resp.Stats.LastContactMS) * time.Millisecond
				p.mu.Lock()
				p.heard[string(id)] = time.Now()
				p.builds[string(id)] = build{resp.Stats.Version, resp.Stats.Commit}
				p.mu.Unlock()
			}
			mu.Lock()
			out[id] = stats
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// NotifyState implements autopilot.ApplicationIntegration: it keeps the
// state for CLUSTER INFO and the metrics, and sends members that the state
// machine holds but the Raft configuration lost (a FORGET cut short after
// its RemoveServer), and are dead, the same way as autopilot's own.
func (p *pilot) NotifyState(s *autopilot.State) {
	p.state.Store(s)
	known := p.KnownServers()
	for _, srv := range known {
		if _, inRaft := s.Servers[srv.ID]; !inRaft && srv.NodeStatus == autopilot.NodeFailed {
			p.RemoveFailedServer(srv)
		}
	}
	p.explainKept(s, known)
}

// explainKept logs, once per member and leadership, a dead member still in
// the Raft configuration a few rounds after it was found dead, and why:
// autopilot keeps one without a word when removing it would leave fewer
// members that can vote than the floor (MinQuorum) or remove a majority of
// the voters, and members of the configuration that the state machine does
// not know count for neither.
func (p *pilot) explainKept(s *autopilot.State, known map[raft.ServerID]*autopilot.Server) {
	potential := 0
	var unknown []string
	for id := range s.Servers {
		if _, ok := known[id]; ok {
			potential++
		} else {
			unknown = append(unknown, string(id))
		}
	}
	sort.Strings(unknown)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, srv := range s.Servers {
		node := string(id)
		k, ok := known[id]
		if !ok || k.NodeStatus != autopilot.NodeFailed || p.kept[node] || p.removing[node] {
			continue
		}
		silent := p.silentFor(node, now)
		if silent < p.c.cfg.DeadMemberAfter+5*p.c.timing.Autopilot {
			continue
		}
		why := "autopilot has not removed it"
		switch {
		case potential-1 < int(p.conf.MinQuorum):
			why = fmt.Sprintf("removing it would leave %d members that can vote, fewer than %d: replace it, or add a member", potential-1, p.conf.MinQuorum)
		case srv.HasVotingRights() && (potential-1)/2 < 1:
			why = "removing it would remove a majority of the voters"
		}
		p.kept[node] = true
		p.c.log.Warn("dead member kept", "node", node, "silent_for", silent.Round(time.Millisecond).String(), "why", why,
			"voters", len(s.Voters), "in_raft_not_in_state_machine", unknown)
	}
}

// RemoveFailedServer implements autopilot.ApplicationIntegration: it
// forgets the member as CLUSTER FORGET does, in the background (autopilot
// expects it to return at once).
func (p *pilot) RemoveFailedServer(srv *autopilot.Server) {
	node := string(srv.ID)
	p.mu.Lock()
	if p.removing[node] || node == p.c.cfg.NodeID {
		p.mu.Unlock()
		return
	}
	p.removing[node] = true
	silent := p.silentFor(node, time.Now())
	p.removals.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.removals.Done()
		defer func() {
			p.mu.Lock()
			delete(p.removing, node)
			p.mu.Unlock()
		}()
		p.c.log.Warn("removing a dead member: not heard from", "node", node, "silent_for", silent.Round(time.Millisecond).String(),
			"dead_member_after", p.c.cfg.DeadMemberAfter.String())
		if err := p.c.forget(node); err != nil {
			p.c.log.Warn("dead member not removed yet", "node", node, "err", err)
		}
	}()
}

// healthList is the leader's view of every member, for the stats requests
// and CLUSTER INFO; nil when autopilot has no state yet.
func (p *pilot) healthList() []MemberHealth {
	s := p.state.Load()
	if s == nil {
		return nil
	}
	now := time.Now()
	known := p.KnownServers()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]MemberHealth, 0, len(s.Servers))
	for id, srv := range s.Servers {
		h := MemberHealth{Node: string(id), Healthy: srv.Health.Healthy, Status: string(autopilot.NodeLeft), LastContactMS: -1}
		if k, ok := known[id]; ok {
			h.Status = string(k.NodeStatus)
		}
		switch last, ok := p.heard[string(id)]; {
		case string(id) == p.c.cfg.NodeID:
			h.LastContactMS = 0
			h.Version, h.Commit = p.c.cfg.Version, p.c.cfg.Commit
			h.LastIndex = srv.Stats.LastIndex
		case ok:
			h.LastContactMS = now.Sub(last).Milliseconds()
			h.Version, h.Commit = p.builds[string(id)].version, p.builds[string(id)].commit
			h.LastIndex = srv.Stats.LastIndex
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// memberHealth is every member's health: the leader's own view, or on a
// follower the copy the leader last sent (with its age added to each last
// contact), nil when neither is known.
func (c *Cluster) memberHealth() map[string]MemberHealth {
	if c.IsLeader() {
		out := map[string]MemberHealth{}
		for _, h := range c.pilot.healthList() {
			out[h.Node] = h
		}
		return out
	}
	v := c.pilot.view.Load()
	if v == nil || time.Since(v.at) > 4*c.timing.Autopilot {
		return nil
	}
	out := make(map[string]MemberHealth, len(v.members))
	age := time.Since(v.at).Milliseconds()
	for id, h := range v.members {
		if h.LastContactMS >= 0 {
			h.LastContactMS += age
		}
		out[id] = h
	}
	return out
}

// answerStats answers the leader's stats request, keeping its view.
func (c *Cluster) answerStats(req *request) *response {
	if req.Node != c.cfg.NodeID {
		return &response{wireError: wireErrorOf(fmt.Errorf("%w: this is node %s, not %s", ErrRefused, c.cfg.NodeID, req.Node))}
	}
	if req.View != nil {
		v := &leaderView{members: make(map[string]MemberHealth, len(req.View)), at: time.Now()}
		for _, h := range req.View {
			v.members[h.Node] = h
		}
		c.pilot.view.Store(v)
	}
	st := c.localStats()
	return &response{Stats: &st}
}

// localStats is this node's Raft progress, for autopilot.
func (c *Cluster) localStats() memberStats {
	st := memberStats{LastContactMS: -1, LastIndex: c.raft.LastIndex(), Version: c.cfg.Version, Commit: c.cfg.Commit}
	st.LastTerm, _ = strconv.ParseUint(c.raft.Stats()["last_log_term"], 10, 64)
	if c.IsLeader() {
		st.LastContactMS = 0
	} else if last := c.raft.LastContact(); !last.IsZero() {
		st.LastContactMS = time.Since(last).Milliseconds()
	}
	return st
}

// voterPromoter is the autopilot Promoter: it wants at most max voters, as
// wantVoters counts them, chosen from the healthy members (non-voters
// once stable) with the leader first, then the current voters, spread over
// zones so that losing one zone leaves a majority whenever the zone count
// allows it. A voter that is unhealthy keeps its vote while no healthy
// member can take it: demoting it would not make the cluster any safer.
type voterPromoter struct{ max int }

func (voterPromoter) GetServerExt(*autopilot.Config, *autopilot.ServerState) any { return nil }
func (voterPromoter) GetStateExt(*autopilot.Config, *autopilot.State) any        { return nil }

func (voterPromoter) GetNodeTypes(_ *autopilot.Config, s *autopilot.State) map[raft.ServerID]autopilot.NodeType {
	types := make(map[raft.ServerID]autopilot.NodeType, len(s.Servers))
	for id := range s.Servers {
		types[id] = autopilot.NodeVoter // every member may vote
	}
	return types
}

func (voterPromoter) FilterFailedServerRemovals(_ *autopilot.Config, _ *autopilot.State, f *autopilot.FailedServers) *autopilot.FailedServers {
	return f // autopilot itself keeps the floor (MinQuorum) and removes at most a minority
}

func (voterPromoter) IsPotentialVoter(t autopilot.NodeType) bool { return t == autopilot.NodeVoter }

func (p voterPromoter) CalculatePromotionsAndDemotions(conf *autopilot.Config, s *autopilot.State) autopilot.RaftChanges {
	want := p.voters(conf, s, time.Now())
	var changes autopilot.RaftChanges
	for id, srv := range s.Servers {
		switch voting := srv.State != autopilot.RaftNonVoter && srv.State != autopilot.RaftNone; {
		case want[id] && !voting:
			changes.Promotions = append(changes.Promotions, id)
		case !want[id] && voting:
			changes.Demotions = append(changes.Demotions, id)
		}
	}
	// Promotions first, demotions only once none is left. raft-autopilot
	// would demote a failed voter first (of an odd count), to keep the
	// quorum small; but a voter that is only slow or cut off then may
	// take the demotion, stop campaigning and hold the longest log: if the
	// leader is cut off at that moment, no other voter can win an election
	// until it is back. A
	// promotion first leaves that node a voter, and the voter count it
	// raises for a round tolerates as many failures as the demotion's
	// would: three of four voters alive against two of two.
	if len(changes.Promotions) > 0 {
		changes.Demotions = nil
	}
	sort.Slice(changes.Promotions, func(i, j int) bool { return changes.Promotions[i] < changes.Promotions[j] })
	sort.Slice(changes.Demotions, func(i, j int) bool { return changes.Demotions[i] < changes.Demotions[j] })
	return changes
}

// voters is the set of servers that should vote.
func (p voterPromoter) voters(conf *autopilot.Config, s *autopilot.State, now time.Time) map[raft.ServerID]bool {
	stable := s.ServerStabilizationTime(conf)
	var healthy, failing []*autopilot.ServerState
	for _, srv := range s.Servers {
		voting := srv.State != autopilot.RaftNonVoter && srv.State != autopilot.RaftNone
		switch {
		case srv.State == autopilot.RaftLeader, voting && srv.Health.Healthy, !voting && srv.Health.IsStable(now, stable):
			healthy = append(healthy, srv)
		case voting:
			failing = append(failing, srv)
		}
	}
	target := wantVoters(p.max, len(healthy)+len(failing))
	rank := func(list []*autopilot.ServerState) {
		sort.Slice(list, func(i, j int) bool {
			a, b := list[i], list[j]
			if ra, rb := rankOf(a), rankOf(b); ra != rb {
				return ra < rb
			}
			return a.Server.ID < b.Server.ID
		})
	}
	rank(healthy)
	rank(failing)
	want := map[raft.ServerID]bool{}
	for _, srv := range spread(healthy, target) {
		want[srv.Server.ID] = true
	}
	for _, srv := range failing {
		if len(want) >= target {
			break
		}
		want[srv.Server.ID] = true
	}
	return want
}

// wantVoters is how many voters autopilot wants, of at most max, with
// members that could vote: as many as there are, up to max, and always an
// odd number. An even count tolerates no more failures than one fewer, each
// commit waits for more of them, and the voter demoted to make it odd
// (after a FORGET or a removal left two or four) can then fail at no cost:
// two voters lose the quorum when either fails, one voter and a non-voter
// only when the voter does.
func wantVoters(max, members int) int {
	target := min(max, members)
	if target%2 == 0 {
		target--
	}
	return target
}

// rankOf orders candidates: the leader, then voters, then the others.
func rankOf(s *autopilot.ServerState) int {
	switch s.State {
	case autopilot.RaftLeader:
		return 0
	case autopilot.RaftVoter, autopilot.RaftStaging:
		return 1
	}
	return 2
}

// spread picks n of the ranked candidates, one zone at a time: always from
// a zone with the fewest picked so far, and among those the one whose next
// candidate ranks best, so that the current voters stay where they are
// spread well.
func spread(ranked []*autopilot.ServerState, n int) []*autopilot.ServerState {
	zones := map[string][]*autopilot.ServerState{}
	var order []string
	for _, s := range ranked {
		z := s.Server.Meta["zone"]
		if _, ok := zones[z]; !ok {
			order = append(order, z)
		}
		zones[z] = append(zones[z], s)
	}
	picked := map[string]int{}
	pos := map[*autopilot.ServerState]int{}
	for i, s := range ranked {
		pos[s] = i
	}
	var out []*autopilot.ServerState
	for len(out) < n {
		best := ""
		found := false
		for _, z := range order {
			if len(zones[z]) == 0 {
				continue
			}
			if !found || picked[z] < picked[best] || picked[z] == picked[best] && pos[zones[z][0]] < pos[zones[best][0]] {
				best, found = z, true
			}
		}
		if !found {
			break
		}
		out = append(out, zones[best][0])
		zones[best] = zones[best][1:]
		picked[best]++
	}
	return out
}

// Voters counts the voters of this node's latest Raft configuration.
func (c *Cluster) Voters() int {
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return 0
	}
	n := 0
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

// Settled reports whether autopilot has nothing left to do for this node:
// it votes, or the cluster already has as many voters as autopilot wants
// (--voters, and no more than its members, an odd number). A node that is
// ready for its peers to be restarted one by one is settled: a readiness
// probe asks this, so that a rolling restart never takes a second voter
// away before the first is replaced.
func (c *Cluster) Settled() bool {
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return false
	}
	servers := cf.Configuration().Servers
	voters, in := 0, false
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
		if s.ID == raft.ServerID(c.cfg.NodeID) {
			in = true
			if s.Suffrage == raft.Voter {
				return true
			}
		}
	}
	return in && voters >= wantVoters(c.cfg.Voters, len(servers))
}
