package autopilot

// Membership that runs itself (docs/operations.md), against real processes on
// loopback started as a Kubernetes StatefulSet starts its pods: fixed
// addresses (the pods' DNS names), the same flags for every pod, --join
// listing every pod (the headless Service), pod 0 first, each next pod once
// the one before is ready. No test here sends an operator command.

import (
	"cmp"
	"context"
	"fmt"
	mbits "math/bits"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// statefulSet is a set of pods with stable addresses.
type statefulSet struct {
	t     testing.TB
	pods  []*pod
	flags []string
	zone  func(i int) string // --zone of pod i (nil: none), as a zone-spread StatefulSet sets it per pod
	// setEvery is how often loadEvery SETs the INCR tag (0: every 300 ms;
	// negative: never). Each SET fences every pod's buffer of the tag.
	setEvery time.Duration
}

type pod struct {
	i                int
	host             string // the pod's own loopback address (127.0.0.N), or 127.0.0.1
	port, raft, dir  string
	p                *systest.Proc
	rdb              *redis.Client
	starts, replaced int
}

func (p *pod) addr() string { return p.host + ":" + p.port }

func newStatefulSet(t testing.TB, n int, flags ...string) *statefulSet {
	return newStatefulSetOn(t, n, false, flags...)
}

// newStatefulSetOn is newStatefulSet with, when ownHosts, pod i on its own
// loopback address 127.0.0.(i+1), as pods have their own IPs, every pod on
// the same RESP and Raft ports.
func newStatefulSetOn(t testing.TB, n int, ownHosts bool, flags ...string) *statefulSet {
	s := &statefulSet{t: t, flags: flags}
	port, raftPort := strconv.Itoa(freePortOn(t, n, ownHosts)), strconv.Itoa(freePortOn(t, n, ownHosts))
	for i := range n {
		p := &pod{i: i, host: "127.0.0.1", port: port, raft: raftPort, dir: t.TempDir()}
		if ownHosts {
			p.host = fmt.Sprintf("127.0.0.%d", i+1)
		} else {
			p.port, p.raft = strconv.Itoa(testproc.FreePort(t)), strconv.Itoa(testproc.FreePort(t))
		}
		p.rdb = redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
			ReadTimeout: 15 * time.Second, PoolSize: 4})
		t.Cleanup(func() { p.rdb.Close() })
		s.pods = append(s.pods, p)
	}
	return s
}

// join is the headless Service: every pod's address, pod 0 first.
func (s *statefulSet) join() string {
	var addrs []string
	for _, p := range s.pods {
		addrs = append(addrs, p.addr())
	}
	return strings.Join(addrs, ",")
}

// start starts pod i on its directory (a new empty one when fresh: a pod
// rescheduled without its volume) and waits until it listens, which a node
// does once autopilot settled it (the readiness a StatefulSet waits for).
func (s *statefulSet) start(i int, fresh bool) error {
	p := s.pods[i]
	if fresh && p.starts > 0 {
		p.dir = s.t.TempDir()
		p.replaced++
	}
	p.starts++
	args := append([]string{"--bind", p.host, "--port", p.port, "--raft-addr", p.host + ":" + p.raft, "--join", s.join()}, s.flags...)
	if s.zone != nil {
		args = append(args, "--zone", s.zone(i))
	}
	proc, err := systest.Launch(s.t, p.dir, nil, args...)
	p.p = proc
	return err
}

// up starts every pod in order, as a StatefulSet's OrderedReady does.
func (s *statefulSet) up() {
	s.t.Helper()
	for i := range s.pods {
		if err := s.start(i, false); err != nil {
			s.t.Fatal(err)
		}
	}
}

// info is CLUSTER INFO of pod i, nil when it does not answer.
func (s *statefulSet) info(i int) map[string]string { return systest.ClusterInfo(s.t, s.pods[i].rdb) }

// leader is the index of the pod that leads, -1 when none is known.
func (s *statefulSet) leader(alive func(int) bool) int {
	for i := range s.pods {
		if !alive(i) {
			continue
		}
		if info := s.info(i); info != nil && info["role"] == "Leader" {
			return i
		}
	}
	return -1
}

// voters is the suffrage of every member as pod i's CLUSTER INFO lists it.
func memberLines(info map[string]string) []map[string]string {
	var out []map[string]string
	for k := 0; ; k++ {
		line, ok := info[fmt.Sprintf("member%d", k)]
		if !ok {
			return out
		}
		m := map[string]string{}
		for _, kv := range strings.Split(line, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
		out = append(out, m)
	}
}

// history is every acknowledged value, with when its request began.
type history struct {
	mu       sync.Mutex
	ids      map[int64]bool
	values   map[int64]bool
	dupIDs   int
	dupVals  int
	spans    []valueSpan
	sets     []ackedSet
	incrOK   [][]time.Time // per pod: when each INCR succeeded
	tries    [][]try       // per pod: every request of loadEvery, to tell what a gap waited on
	setTries []setTry
	errs     map[string]int
	nIDs     int
	nValues  int
}

type valueSpan struct {
	began       time.Time
	first, last int64
}

type ackedSet struct {
	acked time.Time
	v     int64
}

// try is one request: its command, when it began and ended, and its
// error ("" if none).
type try struct {
	cmd          string
	began, ended time.Time
	err          string
}

type setTry struct {
	try
	pod int
}

func newHistory(pods int) *history {
	return &history{ids: map[int64]bool{}, values: map[int64]bool{}, incrOK: make([][]time.Time, pods), tries: make([][]try, pods),
		errs: map[string]int{}}
}

// served is a condition for wait.For: every pod of pods had an INCR
// succeed after since.
func (h *history) served(pods []int, since time.Time) func() (bool, string) {
	return func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, i := range pods {
			if ok := h.incrOK[i]; len(ok) == 0 || !ok[len(ok)-1].After(since) {
				return false, fmt.Sprintf("pod %d: no INCR in the %v since; errors %v", i, time.Since(since).Round(time.Millisecond), h.errs)
			}
		}
		return true, ""
	}
}

func (h *history) addIDs(ids ...int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if h.ids[id] {
			h.dupIDs++
		}
		h.ids[id] = true
		h.nIDs++
	}
}

func (h *history) addValues(pod int, incr bool, began time.Time, first, last int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for v := first; v <= last; v++ {
		if h.values[v] {
			h.dupVals++
		}
		h.values[v] = true
		h.nValues++
	}
	h.spans = append(h.spans, valueSpan{began, first, last})
	if incr {
		now := time.Now()
		h.incrOK[pod] = append(h.incrOK[pod], now)
	}
}

// tried records a request of cmd on pod that began at began.
func (h *history) tried(pod int, cmd string, began time.Time, err error) {
	tr := try{cmd: cmd, began: began, ended: time.Now()}
	if err != nil {
		tr.err = err.Error()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tries[pod] = append(h.tries[pod], tr)
}

func (h *history) fail(err error) {
	word, _, _ := strings.Cut(err.Error(), " ")
	h.mu.Lock()
	h.errs[word]++
	h.mu.Unlock()
}

// belowSet counts values handed out by a request that began after a SET
// was acknowledged, at or below that SET's value.
func (h *history) belowSet() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	sets := append([]ackedSet(nil), h.sets...)
	sort.Slice(sets, func(i, j int) bool { return sets[i].acked.Before(sets[j].acked) })
	floor := make([]int64, len(sets)) // highest acknowledged SET up to each
	for i, s := range sets {
		floor[i] = s.v
		if i > 0 {
			floor[i] = max(floor[i], floor[i-1])
		}
	}
	bad := 0
	for _, sp := range h.spans {
		k := sort.Search(len(sets), func(i int) bool { return !sets[i].acked.Before(sp.began) }) - 1
		if k >= 0 && sp.first <= floor[k] {
			bad++
		}
	}
	return bad
}

// longestIncrGap is the longest time between successive successful INCRs
// on any pod in alive, within [from, to].
func (h *history) longestIncrGap(from, to time.Time, alive []int) time.Duration {
	_, a, b := h.incrGap(from, to, alive)
	return b.Sub(a)
}

// incrGap is that gap: the pod, when its last INCR before the gap and its
// first after it succeeded (from and to bound them).
func (h *history) incrGap(from, to time.Time, alive []int) (pod int, a, b time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pod, a, b = -1, from, from
	gap := func(i int, x, y time.Time) {
		if y.Sub(x) > b.Sub(a) {
			pod, a, b = i, x, y
		}
	}
	for _, i := range alive {
		prev := from
		for _, at := range h.incrOK[i] {
			if at.Before(from) {
				continue
			}
			if at.After(to) {
				break
			}
			gap(i, prev, at)
			prev = at
		}
		gap(i, prev, to)
	}
	return pod, a, b
}

// waitedOn says what the requests of pod waited on between a and b: the
// failed ones by command and error, the longest one, and the SETs in
// flight (each one fences every buffer of the tag), as offsets from t0.
func (h *history) waitedOn(pod int, a, b, t0 time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	off := func(t time.Time) string { return fmt.Sprintf("%+dms", t.Sub(t0).Milliseconds()) }
	failed := map[string]int{}
	var longest try
	for _, tr := range h.tries[pod] {
		if tr.ended.Before(a) || tr.began.After(b) {
			continue
		}
		if tr.err != "" {
			failed[tr.cmd+" "+shortErr(tr.err)]++
		}
		if tr.ended.Sub(tr.began) > longest.ended.Sub(longest.began) {
			longest = tr
		}
	}
	out := fmt.Sprintf("failed %v; longest request %s %v (%s..%s) %s", failed, longest.cmd,
		longest.ended.Sub(longest.began).Round(time.Millisecond), off(longest.began), off(longest.ended), shortErr(longest.err))
	for _, st := range h.setTries {
		if st.ended.Before(a.Add(-time.Second)) || st.began.After(b) {
			continue
		}
		res := "ok"
		if st.err != "" {
			res = shortErr(st.err)
		}
		out += fmt.Sprintf("; SET on pod %d %s..%s %s", st.pod, off(st.began), off(st.ended), res)
	}
	return out
}

// shortErr is the start of an error, enough to tell one cause from another.
func shortErr(s string) string {
	if len(s) > 90 {
		s = s[:90]
	}
	return s
}

// events are the cluster's log lines of the pods in alive that say what
// a gap between a and b waited on (elections, removals, joins, promotions,
// a SET's wait for a removed member), as offsets from t0.
func (s *statefulSet) events(alive []int, a, b, t0 time.Time) []string {
	keys := []string{`msg="raft role"`, "removing a dead member", "replacing a member", "member forgotten", "member joined",
		"a SET waits", "Promoting", "Demoting", "removal", "heartbeat timeout", "election", "autopilot started", "rejecting", "quorum"}
	var out []string
	for _, i := range alive {
		for _, line := range strings.Split(s.pods[i].p.Log(), "\n") {
			rest, ok := strings.CutPrefix(line, "time=")
			if !ok {
				continue
			}
			stamp, _, _ := strings.Cut(rest, " ")
			at, err := time.Parse(time.RFC3339, stamp)
			if err != nil || at.Before(a.Add(-200*time.Millisecond)) || at.After(b) {
				continue
			}
			for _, k := range keys {
				if strings.Contains(line, k) {
					_, msg, _ := strings.Cut(line, "msg=")
					out = append(out, fmt.Sprintf("pod %d %+dms %s", i, at.Sub(t0).Milliseconds(), shortErr(msg)))
					break
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// loadEvery runs NEXTID, GENEID, INCR and NEXTSEG on every pod, and SET on
// one pod after another, until stop is closed.
func loadEvery(s *statefulSet, h *history, stop chan struct{}) *sync.WaitGroup {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i, p := range s.pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				began := time.Now()
				var err error
				switch k % 4 {
				case 0:
					var id int64
					if id, err = p.rdb.Do(ctx, "NEXTID").Int64(); err == nil {
						h.addIDs(id)
					}
				case 1:
					var ids []int64
					if ids, err = p.rdb.Do(ctx, "GENEID", "buyer-"+strconv.Itoa(k), 3).Int64Slice(); err == nil {
						h.addIDs(ids...)
					}
				case 2:
					var v int64
					if v, err = p.rdb.Do(ctx, "INCR", "orders").Int64(); err == nil {
						h.addValues(i, true, began, v, v)
					}
				case 3:
					var v []int64
					if v, err = p.rdb.Do(ctx, "NEXTSEG", "orders", 7).Int64Slice(); err == nil {
						h.addValues(i, false, began, v[0], v[1])
					}
				}
				h.tried(i, [...]string{"NEXTID", "GENEID", "INCR", "NEXTSEG"}[k%4], began, err)
				if err != nil {
					h.fail(err)
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	if s.setEvery < 0 {
		return &wg
	}
	every := cmp.Or(s.setEvery, 300*time.Millisecond)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			pi := k % len(s.pods)
			p := s.pods[pi]
			high, err := p.rdb.Do(ctx, "GET", "orders").Int64()
			if err != nil {
				h.fail(fmt.Errorf("GET-%v", err))
				continue
			}
			// Far enough above what this node has seen that the other
			// nodes' buffers, refilled under load while the SET waits for
			// its Raft round (seconds during a replacement), are below it:
			// a SET under a value already issued is refused, not raced.
			v := high + 1_000_000
			began := time.Now()
			err = p.rdb.Do(ctx, "SET", "orders", v).Err()
			h.mu.Lock()
			st := setTry{try{began: began, ended: time.Now()}, pi}
			if err != nil {
				st.err = err.Error()
			} else {
				h.sets = append(h.sets, ackedSet{st.ended, v})
			}
			h.setTries = append(h.setTries, st)
			h.mu.Unlock()
			if err != nil {
				h.fail(fmt.Errorf("SET-%v", err))
			}
		}
	}()
	return &wg
}

// freePortOn is a port free on 127.0.0.1 and, with ownHosts, on each of
// 127.0.0.1..127.0.0.n (a listener on one loopback address does not hold
// the port on another).
func freePortOn(t testing.TB, n int, ownHosts bool) int {
	t.Helper()
	for range 20 {
		port := testproc.FreePort(t)
		if !ownHosts {
			return port
		}
		free := true
		for i := 1; i <= n && free; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i, port))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return port
		}
	}
	t.Fatalf("no port free on all of 127.0.0.1..127.0.0.%d", n)
	return 0
}

// envInt reads a count from the environment, def when unset.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// settled waits until every pod in alive answers, the cluster has want
// voters and members, all of them alive ones.
func (s *statefulSet) settled(want int, alive func(int) bool, d time.Duration) {
	s.t.Helper()
	wait.For(s.t, d, fmt.Sprintf("%d voters among the live pods", want), func() (bool, string) {
		l := s.leader(alive)
		if l < 0 {
			return false, "no leader"
		}
		info := s.info(l)
		voters, members := 0, 0
		live := map[string]bool{}
		for i := range s.pods {
			if alive(i) {
				live[s.pods[i].addr()] = true
			}
		}
		for _, m := range memberLines(info) {
			members++
			if !live[m["resp"]] {
				return false, fmt.Sprintf("member %s at %s is not a live pod: %v", m["id"], m["resp"], m)
			}
			if m["suffrage"] == "voter" {
				voters++
			}
		}
		return voters == want && members == len(live), fmt.Sprintf("%d voters, %d members: %v", voters, members, info)
	})
}

// rolling replaces each pod in turn (kill -9, then the pod again at its
// address, fresh or on its directory), under load, and checks the history.
//
// IDSERVER_ROLLING_WORKER_BITS sets --worker-bits (default: the fewest
// that give each pod one and leave one more, 4 worker IDs for 3 pods, so
// that from the second replacement on each new pod takes a worker ID a
// dead member held; the long runs use 4).
func rolling(t *testing.T, size int, fresh bool, rounds int) {
	bits := envInt("IDSERVER_ROLLING_WORKER_BITS", mbits.Len(uint(size)))
	flags := append([]string{"--worker-bits", strconv.Itoa(bits), "--seq-bits", strconv.Itoa(22 - bits), "--worker-lease", "3s",
		"--dead-member-after", "20s"}, strings.Fields(os.Getenv("IDSERVER_ROLLING_FLAGS"))...)
	s := newStatefulSet(t, size, flags...)
	s.up()
	all := func(int) bool { return true }
	s.settled(min(size, 5)-(1-min(size, 5)%2), all, 20*time.Second)
	h := newHistory(size)
	stop := make(chan struct{})
	if d, err := time.ParseDuration(os.Getenv("IDSERVER_ROLLING_SET_EVERY")); err == nil {
		s.setEvery = d // 0 or negative: no SET load
		if d <= 0 {
			s.setEvery = -1
		}
	}
	var every []int
	for i := range s.pods {
		every = append(every, i)
	}
	wg := loadEvery(s, h, stop)
	wait.For(t, 20*time.Second, "every pod serves INCRs under load", h.served(every, time.Now()))
	var outages []time.Duration
	leaderKills := 0
	trace := os.Getenv("IDSERVER_ROLLING_TRACE") != ""
	for r := range rounds {
		victim := r % size
		wasLeader := s.leader(all) == victim
		if wasLeader {
			leaderKills++
		}
		var others []int
		for i := range s.pods {
			if i != victim {
				others = append(others, i)
			}
		}
		killed := time.Now()
		s.pods[victim].p.Kill()
		time.Sleep(200 * time.Millisecond) // the pod's replacement is scheduled
		if err := s.start(victim, fresh); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("round %d: pod %d did not come back: %v", r, victim, err)
		}
		listening := time.Since(killed)
		s.settled(min(size, 5)-(1-min(size, 5)%2), all, 30*time.Second)
		settled := time.Since(killed)
		// The INCR gap on the others ends with their first INCR once settled.
		wait.For(t, 30*time.Second, fmt.Sprintf("round %d: INCRs on the other pods once settled", r), h.served(others, killed.Add(settled)))
		pod, a, b := h.incrGap(killed, time.Now(), others)
		outages = append(outages, b.Sub(a))
		// Each round's figures, and for a gap past two election timeouts
		// (1 s) what the INCRs waited on, as offsets from the kill.
		t.Logf("round %d: pod %d killed (the leader: %v); replacement listening %v, settled %v after the kill; longest INCR gap %v on pod %d (%+dms..%+dms)",
			r, victim, wasLeader, listening.Round(time.Millisecond), settled.Round(time.Millisecond), b.Sub(a).Round(time.Millisecond),
			pod, a.Sub(killed).Milliseconds(), b.Sub(killed).Milliseconds())
		if pod >= 0 && (trace || b.Sub(a) > time.Second) {
			t.Logf("  round %d gap on pod %d: %s", r, pod, h.waitedOn(pod, a, b, killed))
			for _, e := range s.events(others, a, b, killed) {
				t.Logf("    %s", e)
			}
		}
	}
	wait.For(t, 30*time.Second, "every pod serves INCRs after the last round", h.served(every, time.Now()))
	if s.setEvery >= 0 {
		// A SET waits for every member to confirm it, so during the
		// rounds' churn it may time out each time; on the settled cluster
		// one lands.
		wait.For(t, 30*time.Second, "a SET acknowledged", func() (bool, string) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.sets) > 0, fmt.Sprintf("%d SETs tried", len(h.setTries))
		})
	}
	close(stop)
	wg.Wait()
	free := s.info(0)["worker_ids_free"]
	t.Logf("%d pods, %d replacements (fresh directory: %v, %d of the leader), --worker-bits %d: %d IDs and %d segment values, "+
		"%d SETs acknowledged; duplicates: %d IDs, %d values; below an acknowledged SET: %d; worker IDs free at the end: %s; "+
		"longest INCR outage on the other pods per replacement: %v (%s); SET every %v; errors %v",
		size, rounds, fresh, leaderKills, bits, h.nIDs, h.nValues, len(h.sets), h.dupIDs, h.dupVals, h.belowSet(), free,
		roundAll(outages), spreadOf(outages), s.setEvery, h.errs)
	if h.dupIDs > 0 || h.dupVals > 0 {
		t.Fatalf("duplicates: %d IDs, %d values", h.dupIDs, h.dupVals)
	}
	if n := h.belowSet(); n > 0 {
		t.Fatalf("%d values handed out at or below a SET acknowledged before they were asked for", n)
	}
	if want := strconv.Itoa(1<<bits - size); free != want {
		t.Fatalf("worker IDs free at the end: %s, want %s (every dead member's returned)", free, want)
	}
	if h.nValues == 0 || h.nIDs == 0 || len(h.sets) == 0 && s.setEvery >= 0 {
		t.Fatalf("no load went through: %d IDs, %d values, %d SETs", h.nIDs, h.nValues, len(h.sets))
	}
}

// spreadOf is the median, the count over two election timeouts (1 s)
// and the longest of ds.
func spreadOf(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	over := 0
	for _, d := range sorted {
		if d > time.Second {
			over++
		}
	}
	return fmt.Sprintf("median %v, %d of %d over 1 s, longest %v", sorted[len(sorted)/2].Round(time.Millisecond), over, len(ds),
		sorted[len(sorted)-1].Round(time.Millisecond))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// TestRollingReplacementEphemeral: three pods without volumes, each
// replaced in turn by a new empty directory at the same address, under
// load, with 4 worker IDs: the replacement removes the dead member and
// joins at once, no operator step, and the dead members' worker IDs are
// reused. CI replaces each pod once; the long runs (docs/operations.md):
//
//	IDSERVER_ROLLING_ROUNDS=30 IDSERVER_ROLLING_WORKER_BITS=4 go test ./systest/autopilot -run 'TestRollingReplacementEphemeral$' -v
//
// with IDSERVER_ROLLING_SIZE=5 for five pods, IDSERVER_ROLLING_SET_EVERY
// (a duration, 0 for none) for the SET load, IDSERVER_ROLLING_TRACE=1 to
// say what the INCRs waited on in every round, not only the slow ones,
// IDSERVER_ROLLING_FLAGS for more flags on every pod.
func TestRollingReplacementEphemeral(t *testing.T) {
	rolling(t, envInt("IDSERVER_ROLLING_SIZE", 3), true, envInt("IDSERVER_ROLLING_ROUNDS", 3))
}

// TestRollingRestartPersistent: the same with volumes: each pod comes back
// on its own directory.
func TestRollingRestartPersistent(t *testing.T) {
	rolling(t, envInt("IDSERVER_ROLLING_SIZE", 3), false, envInt("IDSERVER_ROLLING_ROUNDS", 3))
}

// TestWholeStatefulSetRestartsAtOnce: every pod killed and started again at
// once on its volume; the cluster comes back and nothing repeats.
func TestWholeStatefulSetRestartsAtOnce(t *testing.T) {
	s := newStatefulSet(t, 3, "--worker-lease", "3s")
	s.up()
	all := func(int) bool { return true }
	s.settled(3, all, 20*time.Second)
	h := newHistory(3)
	stop := make(chan struct{})
	wg := loadEvery(s, h, stop)
	every := []int{0, 1, 2}
	wait.For(t, 20*time.Second, "every pod serves INCRs under load", h.served(every, time.Now()))
	for _, p := range s.pods {
		p.p.Kill()
	}
	killed := time.Now()
	errs := make(chan error, len(s.pods))
	for i := range s.pods {
		go func() { errs <- s.start(i, false) }()
	}
	for range s.pods {
		if err := <-errs; err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
	}
	back := time.Since(killed)
	s.settled(3, all, 30*time.Second)
	h.mu.Lock()
	before := h.nValues
	h.mu.Unlock()
	wait.For(t, 30*time.Second, "every pod serves INCRs after the restart", h.served(every, time.Now()))
	close(stop)
	wg.Wait()
	t.Logf("3 pods killed at once and restarted on their volumes: all listening again after %v; %d IDs, %d values, %d SETs; "+
		"duplicates %d IDs %d values, below a SET %d; errors %v", back.Round(time.Millisecond), h.nIDs, h.nValues, len(h.sets),
		h.dupIDs, h.dupVals, h.belowSet(), h.errs)
	if h.dupIDs > 0 || h.dupVals > 0 || h.belowSet() > 0 {
		t.Fatalf("duplicates: %d IDs, %d values; below a SET: %d", h.dupIDs, h.dupVals, h.belowSet())
	}
	if h.nValues == before {
		t.Fatal("no values after the restart")
	}
}

// TestRemovedPodBackWithItsVolumeJoinsAgain: a pod with a volume down for
// longer than --dead-member-after (a node drained for maintenance, a
// volume slow to attach elsewhere) is removed by the cluster. Started again
// on its volume, as the StatefulSet does, it joins again as a new member
// under its node ID, its old state moved aside: no operator step, and
// nothing repeats.
func TestRemovedPodBackWithItsVolumeJoinsAgain(t *testing.T) {
	s := newStatefulSet(t, 4, "--voters", "3", "--worker-lease", "2s", "--dead-member-after", "3s")
	s.up()
	all := func(int) bool { return true }
	s.settled(3, all, 30*time.Second)
	h := newHistory(len(s.pods))
	stop := make(chan struct{})
	wg := loadEvery(s, h, stop)
	finish := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer finish()
	every := []int{0, 1, 2, 3}
	wait.For(t, 20*time.Second, "every pod serves INCRs under load", h.served(every, time.Now()))
	victim := (s.leader(all) + 1) % len(s.pods)
	id := s.info(victim)["node_id"]
	s.pods[victim].p.Kill()
	down := time.Now()
	alive := func(i int) bool { return i != victim }
	wait.For(t, 40*time.Second, id+" removed by the cluster", func() (bool, string) {
		l := s.leader(alive)
		if l < 0 {
			return false, "no leader"
		}
		info := s.info(l)
		for _, m := range memberLines(info) {
			if m["id"] == id {
				return false, "still a member: " + info["member_list"]
			}
		}
		return true, ""
	})
	removed := time.Since(down)
	if err := s.start(victim, false); err != nil {
		t.Fatalf("%s, back on its volume after its removal, did not start: %v", id, err)
	}
	s.settled(3, all, 30*time.Second)
	info := s.info(victim)
	if info["node_id"] != id {
		t.Fatalf("the pod came back as node %q, not %s", info["node_id"], id)
	}
	if _, err := os.Stat(filepath.Join(s.pods[victim].dir, "removed", "pebble")); err != nil {
		t.Fatalf("its old state was not moved aside: %v", err)
	}
	h.mu.Lock()
	from := h.nValues
	h.mu.Unlock()
	wait.For(t, 30*time.Second, "every pod, "+id+" among them, serves INCRs after it joined again", h.served(every, time.Now()))
	finish()
	t.Logf("%s killed, removed by the cluster %v later, back on its volume: joined again as worker %s (%s moved aside); "+
		"%d IDs, %d values, %d SETs; duplicates %d IDs %d values, below a SET %d; errors %v", id, removed.Round(100*time.Millisecond),
		info["worker_id"], filepath.Join(s.pods[victim].dir, "removed"), h.nIDs, h.nValues, len(h.sets), h.dupIDs, h.dupVals, h.belowSet(), h.errs)
	if h.dupIDs > 0 || h.dupVals > 0 || h.belowSet() > 0 {
		t.Fatalf("duplicates: %d IDs, %d values; below a SET: %d", h.dupIDs, h.dupVals, h.belowSet())
	}
	if h.nValues == from {
		t.Fatal("no values after it joined again")
	}
}

// TestGrowthBeyondVoters: more pods than --voters, each on its own address
// 127.0.0.1..127.0.0.N: exactly that many voters, the others non-voters
// that serve everything; a minority of the voters killed at once (2 of 5),
// then the leader: back to the same number of voters; non-voters killed: removed after --dead-member-after,
// their worker IDs free again. IDSERVER_GROWTH_SIZE=25 for 25 pods (5
// voters); BenchmarkClusterLatency times a voter against a non-voter.
func TestGrowthBeyondVoters(t *testing.T) {
	size := envInt("IDSERVER_GROWTH_SIZE", 7)
	voters := 3
	if size >= 9 {
		voters = 5
	}
	s := newStatefulSetOn(t, size, true, "--voters", strconv.Itoa(voters), "--dead-member-after", "4s", "--worker-lease", "2s")
	s.up()
	dead := map[int]bool{}
	alive := func(i int) bool { return !dead[i] }
	s.settled(voters, alive, 30*time.Second)
	h := newHistory(size)
	stop := make(chan struct{})
	wg := loadEvery(s, h, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()
	suffrage := func() map[int]string {
		out := map[int]string{}
		l := s.leader(alive)
		if l < 0 {
			t.Fatal("no leader")
		}
		info := s.info(l)
		for _, m := range memberLines(info) {
			for i, p := range s.pods {
				if p.addr() == m["resp"] {
					out[i] = m["suffrage"]
				}
			}
		}
		return out
	}
	// Every non-voter serves every command.
	for i, sf := range suffrage() {
		if sf != "nonvoter" {
			continue
		}
		// Served, or TRYAGAIN while the leadership changes (a step-down
		// under load), as a client retries.
		if err := systest.UntilServed(t, s.pods[i].rdb, "SET", "grown", 10).Err(); err != nil {
			t.Fatalf("SET on non-voter pod %d: %v", i, err)
		}
		if v, err := systest.UntilServed(t, s.pods[i].rdb, "INCR", "grown").Int64(); err != nil || v <= 10 {
			t.Fatalf("INCR on non-voter pod %d after SET 10: %d %v", i, v, err)
		}
		break
	}
	freeAt := func() int {
		n, _ := strconv.Atoi(s.info(s.leader(alive))["worker_ids_free"])
		return n
	}
	free0 := freeAt()
	kill := func(i int) {
		dead[i] = true
		s.pods[i].p.Kill()
	}
	// A minority of the voters that do not lead at once (2 of 5, 1 of 3),
	// then the leader.
	l := s.leader(alive)
	voterKills := 0
	for i, sf := range suffrage() {
		if sf == "voter" && i != l && voterKills < voters/2 {
			kill(i)
			voterKills++
		}
	}
	began := time.Now()
	s.settled(voters, alive, 30*time.Second)
	afterVoter := time.Since(began)
	kill(s.leader(alive))
	began = time.Now()
	s.settled(voters, alive, 30*time.Second)
	afterLeader := time.Since(began)
	// Non-voters: all but one.
	killed := 0
	for i, sf := range suffrage() {
		if sf == "nonvoter" && killed < size-voters-2-voterKills {
			kill(i)
			killed++
		}
	}
	began = time.Now()
	s.settled(voters, alive, 60*time.Second)
	afterNonvoters := time.Since(began)
	free := freeAt()
	close(stop)
	wg.Wait()
	t.Logf("%d pods, --voters %d: back to %d voters %v after %d voters were killed, %v after the leader was; %d non-voters killed: "+
		"removed after %v, worker IDs free %d -> %d; %d IDs, %d values, duplicates %d/%d, below a SET %d; errors %v",
		size, voters, voters, afterVoter.Round(time.Millisecond), voterKills, afterLeader.Round(time.Millisecond), killed,
		afterNonvoters.Round(time.Millisecond), free0, free, h.nIDs, h.nValues, h.dupIDs, h.dupVals, h.belowSet(), h.errs)
	if want := free0 + voterKills + 1 + killed; free != want {
		t.Fatalf("worker IDs free: %d before, %d after %d members were removed; want %d", free0, free, voterKills+1+killed, want)
	}
	if h.dupIDs > 0 || h.dupVals > 0 || h.belowSet() > 0 {
		t.Fatalf("duplicates: %d IDs, %d values; below a SET: %d", h.dupIDs, h.dupVals, h.belowSet())
	}
}

// TestAutopilotMisconfigurationExits2: --voters 0 or negative and a
// negative or sub-2s --dead-member-after are refused at start with exit 2; an even
// --voters starts with a warning.
func TestAutopilotMisconfigurationExits2(t *testing.T) {
	for _, args := range [][]string{{"--voters", "0"}, {"--voters", "-3"}, {"--dead-member-after", "-1s"}, {"--dead-member-after", "1ms"}, {"--zone", "a,b"}} {
		code, out := systest.RunToExit(t, append([]string{"--dir", t.TempDir(), "--port", systest.FreePort(t)}, args...)...)
		if code != 2 || !strings.Contains(out, strings.TrimPrefix(args[0], "--")) {
			t.Fatalf("%v: exit %d, want 2 naming the flag:\n%s", args, code, out)
		}
	}
	p := systest.StartProc(t, t.TempDir(), "--voters", "4")
	if !strings.Contains(p.Log(), "--voters 4 is even") {
		t.Fatalf("no warning for an even --voters:\n%s", p.Log())
	}
	p.Kill()
}

// TestRefusedJoinerNamesTheReason: a joiner with another ID layout is
// refused, and its error says why, not "no leader reachable".
func TestRefusedJoinerNamesTheReason(t *testing.T) {
	first := systest.StartProc(t, t.TempDir())
	code, out := systest.RunToExit(t, "--dir", t.TempDir(), "--port", systest.FreePort(t), "--raft-addr", systest.FreeAddr(t), "--join", first.Addr,
		"--worker-bits", "8", "--seq-bits", "14")
	if code == 0 || !strings.Contains(out, "layout") || strings.Contains(out, "no leader reachable") {
		t.Fatalf("joiner with another layout: exit %d, want a refusal naming the layout:\n%s", code, out)
	}
}

// TestZoneLossKeepsAMajority: nine pods in three zones, --voters 5: the
// voters are spread 2+2+1, so that losing any zone leaves a majority. The
// zone with the leader is killed under load: the others elect a leader and
// serve, and the lost zone's voters are replaced from the other two zones.
func TestZoneLossKeepsAMajority(t *testing.T) {
	zones := []string{"a", "b", "c"}
	s := newStatefulSet(t, 9, "--voters", "5", "--dead-member-after", "4s", "--worker-lease", "2s")
	s.zone = func(i int) string { return zones[i%3] }
	s.up()
	dead := map[int]bool{}
	alive := func(i int) bool { return !dead[i] }
	s.settled(5, alive, 40*time.Second)
	perZone := func() map[string]int {
		out := map[string]int{}
		l := s.leader(alive)
		if l < 0 {
			return nil
		}
		for _, m := range memberLines(s.info(l)) {
			if m["suffrage"] == "voter" {
				out[m["zone"]]++
			}
		}
		return out
	}
	wait.For(t, 20*time.Second, "voters spread 2+2+1 over the zones", func() (bool, string) {
		z := perZone()
		return len(z) == 3 && z["a"] <= 2 && z["b"] <= 2 && z["c"] <= 2, fmt.Sprint(z)
	})
	h := newHistory(len(s.pods))
	stop := make(chan struct{})
	wg := loadEvery(s, h, stop)
	var every []int
	for i := range s.pods {
		every = append(every, i)
	}
	wait.For(t, 20*time.Second, "every pod serves INCRs under load", h.served(every, time.Now()))
	// A leader may be stepping down under the load (the Raft timeouts are
	// fixed): the zone to kill is the next leader's.
	leader := -1
	wait.For(t, 20*time.Second, "a leader under load", func() (bool, string) {
		leader = s.leader(alive)
		return leader >= 0, "none"
	})
	lost := zones[leader%3]
	killed := time.Now()
	var survivors []int
	for i := range s.pods {
		if zones[i%3] == lost {
			dead[i] = true
			s.pods[i].p.Kill()
		} else {
			survivors = append(survivors, i)
		}
	}
	wait.For(t, 10*time.Second, "a leader in the other zones", func() (bool, string) { return s.leader(alive) >= 0, "none" })
	elected := time.Since(killed)
	// The INCR gap on the survivors ends with their first INCR under the new leader.
	wait.For(t, 30*time.Second, "INCRs on every survivor under the new leader", h.served(survivors, killed.Add(elected)))
	outage := h.longestIncrGap(killed, time.Now(), survivors)
	s.settled(5, alive, 40*time.Second)
	z := perZone()
	close(stop)
	wg.Wait()
	t.Logf("9 pods in zones a, b, c, --voters 5; zone %s (with the leader) killed: a leader again after %v, longest INCR outage "+
		"on the other zones %v; voters per zone after the dead were removed: %v; %d IDs, %d values, duplicates %d/%d, "+
		"below a SET %d; errors %v", lost, elected.Round(time.Millisecond), outage.Round(time.Millisecond), z, h.nIDs, h.nValues,
		h.dupIDs, h.dupVals, h.belowSet(), h.errs)
	if z[lost] != 0 || z[zones[0]]+z[zones[1]]+z[zones[2]] != 5 {
		t.Fatalf("voters per zone %v: want 5 in the two zones left", z)
	}
	if h.dupIDs > 0 || h.dupVals > 0 || h.belowSet() > 0 {
		t.Fatalf("duplicates: %d IDs, %d values; below a SET: %d", h.dupIDs, h.dupVals, h.belowSet())
	}
}

// latencies times n sequential INCRs and NEXTIDs and n/100 SETs on rdb,
// each SET followed by an INCR (which waits for one refill through the
// leader: the SET's fence dropped every buffer of the tag), and answers
// their p50/p99.
func latencies(t testing.TB, rdb *redis.Client, n int) string {
	t.Helper()
	return measure(rdb, n).String()
}

// latency holds the sorted durations of each kind of request.
type latency struct {
	incr, nextID, set, refill []time.Duration
}

// measure runs what latencies describes.
func measure(rdb *redis.Client, n int) latency {
	ctx := context.Background()
	timed := func(cmd ...any) (time.Duration, bool) {
		began := time.Now()
		err := rdb.Do(ctx, cmd...).Err()
		return time.Since(began), err == nil
	}
	var l latency
	for range n {
		if d, ok := timed("INCR", "latency"); ok {
			l.incr = append(l.incr, d)
		}
	}
	for range n {
		if d, ok := timed("NEXTID"); ok {
			l.nextID = append(l.nextID, d)
		}
	}
	high, _ := rdb.Do(ctx, "GET", "latency").Int64()
	for range max(n/100, 1) {
		high += 1000
		if d, ok := timed("SET", "latency", high); ok {
			l.set = append(l.set, d)
		}
		if d, ok := timed("INCR", "latency"); ok {
			l.refill = append(l.refill, d)
		}
	}
	for _, d := range [][]time.Duration{l.incr, l.nextID, l.set, l.refill} {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	}
	return l
}

// pct is the p-th percentile of sorted d, 0 for none.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)*p/100, len(d)-1)]
}

func (l latency) String() string {
	f := func(d []time.Duration) string {
		if len(d) == 0 {
			return "none answered"
		}
		return fmt.Sprintf("%v/%v", pct(d, 50).Round(time.Microsecond), pct(d, 99).Round(time.Microsecond))
	}
	return fmt.Sprintf("INCR %s, NEXTID %s, SET %s, INCR after a SET (one refill) %s", f(l.incr), f(l.nextID), f(l.set), f(l.refill))
}

// BenchmarkClusterLatency compares a cluster of 5 pods (5 voters) with one
// of 25 (5 voters, 20 non-voters), --voters 5, pod i on its own loopback
// address 127.0.0.(i+1) with the same ports, as StatefulSet pods have
// their own IPs: INCR and NEXTID (p50/p99) on the leader, on a voter that
// does not lead and on a non-voter, and SET and the INCR after it (one
// refill through the leader) on each, with no other load. Each size is one
// whole measurement, whatever b.N:
//
//	go test ./systest/autopilot -run '^$' -bench ClusterLatency -benchtime 1x -v
func BenchmarkClusterLatency(b *testing.B) {
	for _, size := range []int{5, 25} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			s := newStatefulSetOn(b, size, true, "--voters", "5")
			s.up()
			all := func(int) bool { return true }
			s.settled(5, all, 60*time.Second)
			l := s.leader(all)
			picked := map[string]int{"leader": l}
			for _, m := range memberLines(s.info(l)) {
				for i, p := range s.pods {
					if p.addr() != m["resp"] || i == l {
						continue
					}
					if _, ok := picked[m["suffrage"]]; !ok {
						picked[m["suffrage"]] = i
					}
				}
			}
			for _, role := range []string{"leader", "voter", "nonvoter"} {
				i, ok := picked[role]
				if !ok {
					continue
				}
				m := measure(s.pods[i].rdb, 5000)
				b.Logf("%d pods, --voters 5, %s pod %d at %s: %v", size, role, i, s.pods[i].addr(), m)
				for name, d := range map[string][]time.Duration{"INCR": m.incr, "NEXTID": m.nextID, "SET": m.set, "refill": m.refill} {
					b.ReportMetric(float64(pct(d, 50).Microseconds()), role+"-"+name+"-p50-µs")
					b.ReportMetric(float64(pct(d, 99).Microseconds()), role+"-"+name+"-p99-µs")
				}
			}
		})
	}
}
