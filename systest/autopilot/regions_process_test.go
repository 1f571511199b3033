package autopilot

// Regions: the three zones of TestZoneLossKeepsAMajority as three regions,
// 40 ms one way between them and about 1 ms inside one.
//
// The kernel here has no netem, so the delay is in toxiproxy, run in this
// process. A node advertises one RESP and one Raft address to every member
// (--advertise, --raft-advertise), but a toxiproxy listener has one delay
// for whoever dials it: advertising a 40 ms listener would also put 40 ms
// between two nodes of one zone. So each address a node advertises is its
// 40 ms listener, and each zone has its own view of the others, as its own
// DNS or routes would give it: the test runs in a network namespace of its
// own (loopback only), each zone's processes run under a group ID of their
// own, and one iptables DNAT rule per node and port sends that node's own
// zone (matched by the group ID, -m owner) to its 1 ms listener instead.
// Every cross-zone byte goes through a 40 ms toxic each way, every in-zone
// byte between nodes through a 1 ms one; nothing reaches a node's bound
// ports but its proxies and the test's clients, which stand beside it.
//
//	zone b node --dial 127.0.0.1:WAN(a1)--> 40 ms proxy --> a1's bound port
//	zone a node --dial 127.0.0.1:WAN(a1)--DNAT--> 1 ms proxy --> a1's bound port
//
// The test re-runs itself under `unshare --net`, so that its iptables rules
// live and die with a namespace it made.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// regionsNetns, in the environment, is the network namespace the test was
// started in: the re-run under unshare checks it is in another one.
const regionsNetns = "IDSERVER_REGIONS_PARENT_NETNS"

// TestRegions: pods in zones a, b, c, --voters 5, 40 ms one way between
// zones (IDSERVER_REGIONS_MS; 0 for the same run, proxies and all, without
// delay). It times the joins, then NEXTID, INCR, NEXTSEG and SET on a node
// in the leader's zone and on one in a zone without the leader: NEXTID and
// buffered INCR stay local there (no cross-zone round trip), a SET pays
// several. Then, under load, the leader is killed. go test runs 3 pods, one
// a zone (about 25 s); IDSERVER_REGIONS_SIZE=9 runs the nine pods of
// TestZoneLossKeepsAMajority (60-70 s), and then also cuts off and kills
// the whole zone of the next leader. Each failover reports the time to a new
// leader, the longest INCR and NEXTID gaps and (9 pods) the first SET after.
// Nothing repeats and no value is handed out below an acknowledged SET.
func TestRegions(t *testing.T) {
	if os.Getenv(regionsNetns) == "" {
		regionsInOwnNetns(t)
		return
	}
	mine, _ := os.Readlink("/proc/self/ns/net")
	if mine == os.Getenv(regionsNetns) {
		t.Fatalf("still in network namespace %s: refusing to add iptables rules outside a namespace of the test's own", mine)
	}
	regions(t, regionsDelay())
}

// regionsDelay is IDSERVER_REGIONS_MS, 40 when unset.
func regionsDelay() int {
	if n, err := strconv.Atoi(os.Getenv("IDSERVER_REGIONS_MS")); err == nil && n >= 0 {
		return n
	}
	return 40
}

// regionsInOwnNetns runs this test again in a new network namespace and
// passes on its output and its verdict.
func regionsInOwnNetns(t *testing.T) {
	testproc.NeedRoot(t, "TestRegions (a network namespace and iptables rules)")
	for _, tool := range []string{"unshare", "setpriv", "iptables", "bash"} {
		testproc.Need(t, tool)
	}
	netns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skipf("no /proc/self/ns/net: %v", err)
	}
	cmd := exec.Command("unshare", "--net", "--", os.Args[0], "-test.run=^TestRegions$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), regionsNetns+"="+netns)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	passed, redisLog := false, 0
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		passed = passed || strings.HasPrefix(line, "--- PASS: TestRegions")
		if strings.HasPrefix(line, "redis: ") {
			redisLog++ // go-redis's own log of dials refused by the pods killed on purpose
			continue
		}
		t.Log(line)
	}
	t.Logf("(%d lines of go-redis's log left out)", redisLog)
	if err := cmd.Wait(); err != nil || !passed {
		t.Fatalf("TestRegions in its own network namespace: %v (passed: %v)", err, passed)
	}
}

// region is one pod of the run: its bound ports, the proxies in front of
// them, and the group ID its zone's processes run under.
type region struct {
	zone               int
	bindRESP, bindRaft string
	wanRESP, wanRaft   string // advertised: 40 ms listeners
	lanRESP, lanRaft   string // 1 ms listeners, for its own zone through DNAT
	proxies            []*toxiproxy.Proxy
	proxiesStarted     bool
}

func regions(t *testing.T, delay int) {
	size := envInt("IDSERVER_REGIONS_SIZE", 3)
	if size%3 != 0 {
		t.Fatalf("IDSERVER_REGIONS_SIZE %d: want a multiple of 3 (three zones)", size)
	}
	zoneNames := []string{"a", "b", "c"}
	inZone := min(1, delay) // ms one way between two nodes of a zone: 1, or 0 for the run without delay
	loadBefore := loadAvg()
	began := time.Now()
	loopbackUp(t)

	logger := zerolog.Nop()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), logger)
	newProxy := func(name, listen, upstream string, ms int) *toxiproxy.Proxy {
		p := toxiproxy.NewProxy(server, name, listen, upstream)
		for _, stream := range []string{"upstream", "downstream"} {
			spec := fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":"%s","attributes":{"latency":%d}}`, stream, stream, ms)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(p.Stop)
		return p
	}
	// Ports below the ephemeral range (32768 and up): in a namespace of
	// its own nothing else binds them, and no outgoing connection takes
	// one between now and the pod's start, as it could a free port.
	next := 20000
	port := func() string {
		next++
		return strconv.Itoa(next)
	}
	at := func(p string) string { return "127.0.0.1:" + p }
	gid := func(zone int) int { return 64000 + zone }

	// Each zone's processes run as root under the zone's group ID.
	wrappers := make([]string, len(zoneNames))
	for z := range zoneNames {
		wrappers[z] = filepath.Join(t.TempDir(), "idserver-zone-"+zoneNames[z])
		script := fmt.Sprintf("#!/bin/sh\nexec setpriv --pdeathsig KILL --regid %d --clear-groups -- %s \"$@\"\n", gid(z), systest.Binary(t))
		if err := os.WriteFile(wrappers[z], []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pods := make([]*region, size)
	s := &statefulSet{t: t}
	var join []string
	for i := range pods {
		r := &region{zone: i % 3, bindRESP: port(), bindRaft: port(), wanRESP: port(), wanRaft: port(), lanRESP: port(), lanRaft: port()}
		name := fmt.Sprintf("pod%d-", i)
		r.proxies = []*toxiproxy.Proxy{
			newProxy(name+"resp-wan", at(r.wanRESP), at(r.bindRESP), delay), newProxy(name+"raft-wan", at(r.wanRaft), at(r.bindRaft), delay),
			newProxy(name+"resp-lan", at(r.lanRESP), at(r.bindRESP), inZone), newProxy(name+"raft-lan", at(r.lanRaft), at(r.bindRaft), inZone),
		}
		for _, pair := range [][2]string{{r.wanRESP, r.lanRESP}, {r.wanRaft, r.lanRaft}} {
			setup(t, "iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", pair[0],
				"-m", "owner", "--gid-owner", strconv.Itoa(gid(r.zone)), "-j", "DNAT", "--to-destination", at(pair[1]))
		}
		pods[i] = r
		join = append(join, at(r.wanRESP)) // the headless Service: what every pod advertises
		p := &pod{i: i, host: "127.0.0.1", port: r.bindRESP, raft: r.bindRaft, dir: t.TempDir()}
		p.rdb = redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
			ReadTimeout: 15 * time.Second, PoolSize: 4})
		t.Cleanup(func() { p.rdb.Close() })
		s.pods = append(s.pods, p)
	}
	// A pod's proxies listen from just before it starts: a listener with
	// nothing behind it would accept the first pod's probe of its peers,
	// which then would not bootstrap.
	start := func(i int) time.Duration {
		r, p := pods[i], s.pods[i]
		if !r.proxiesStarted {
			for _, px := range r.proxies {
				if err := px.Start(); err != nil {
					t.Fatal(err)
				}
			}
			r.proxiesStarted = true
		}
		args := []string{"--port", r.bindRESP, "--raft-addr", at(r.bindRaft), "--advertise", at(r.wanRESP), "--raft-advertise", at(r.wanRaft),
			"--join", strings.Join(join, ","), "--zone", zoneNames[r.zone], "--voters", "5", "--dead-member-after", "4s"}
		t0 := time.Now()
		proc, err := systest.StartConfig(t, testproc.Config{Binary: wrappers[r.zone], Dir: p.dir, Args: args})
		if err != nil {
			t.Fatalf("pod %d (zone %s): %v", i, zoneNames[r.zone], err)
		}
		p.p = proc
		return time.Since(t0)
	}
	joins := make([]time.Duration, size)
	for i := range pods {
		joins[i] = start(i)
	}
	upAfter := time.Since(began)

	// The arrangement itself: a PING to pod 1's advertised address takes
	// the 1 ms path from its own zone and the 40 ms one from another.
	inZonePing, crossZone := pingFrom(t, gid(pods[1].zone), pods[1].wanRESP), pingFrom(t, gid(pods[0].zone), pods[1].wanRESP)
	if inZonePing >= 40*time.Millisecond || crossZone < time.Duration(2*delay)*time.Millisecond {
		t.Fatalf("PING to pod 1's advertised address: %v from its own zone, %v from zone a; want under 40 ms, and at least %d ms",
			inZonePing, crossZone, 2*delay)
	}

	dead := map[int]bool{}
	alive := func(i int) bool { return !dead[i] }
	podAt := map[string]int{}
	for i, r := range pods {
		podAt[at(r.wanRESP)] = i
	}
	members := func() (leader int, voters map[string]int, suffrage map[int]string, state string) {
		leader = s.leader(alive)
		if leader < 0 {
			return -1, nil, nil, "no leader"
		}
		info := s.info(leader)
		voters, suffrage = map[string]int{}, map[int]string{}
		for _, m := range memberLines(info) {
			i, ok := podAt[m["resp"]]
			if !ok || dead[i] {
				return leader, nil, nil, fmt.Sprintf("member %v is not a live pod", m)
			}
			suffrage[i] = m["suffrage"]
			if m["suffrage"] == "voter" {
				voters[m["zone"]]++
			}
		}
		return leader, voters, suffrage, fmt.Sprintf("voters per zone %v, suffrage %v", voters, suffrage)
	}
	live := func() int {
		n := 0
		for i := range pods {
			if alive(i) {
				n++
			}
		}
		return n
	}
	// settle waits for the voters autopilot wants (5 of 9, 3 of 3), as
	// evenly spread over the zones that have live pods as they can be
	// (2+2+1, 3+2, 1+1+1), and no dead member left.
	settle := func(what string, d time.Duration) (int, map[string]int, map[int]string) {
		t.Helper()
		var leader int
		var voters map[string]int
		var suffrage map[int]string
		want := min(5, live()-1+live()%2)
		zones := map[int]bool{}
		for i, r := range pods {
			if alive(i) {
				zones[r.zone] = true
			}
		}
		most := (want + len(zones) - 1) / len(zones)
		wait.For(t, d, fmt.Sprintf("%s: %d voters, at most %d a zone", what, want, most), func() (bool, string) {
			var state string
			leader, voters, suffrage, state = members()
			total, spread := 0, true
			for _, n := range voters {
				total += n
				spread = spread && n <= most
			}
			return leader >= 0 && total == want && len(suffrage) == live() && spread, state
		})
		return leader, voters, suffrage
	}
	leader, voters, suffrage := settle("voters spread over the zones", 40*time.Second)

	// Latency, one request at a time, on a follower in the leader's zone
	// and on a node in a zone without the leader (each on its own tags).
	// With one pod a zone the leader's zone has only the leader.
	near, far := leader, -1
	for i := range pods {
		switch {
		case i == leader:
		case pods[i].zone == pods[leader].zone && near == leader:
			near = i
		case pods[i].zone != pods[leader].zone && far < 0:
			far = i
		}
	}
	n := envInt("IDSERVER_REGIONS_REQUESTS", 2000)
	sets := envInt("IDSERVER_REGIONS_SETS", 2+size)
	nearLat, nearRetried := regionLatencies(t, s.pods[near].rdb, "near", n, sets)
	farLat, farRetried := regionLatencies(t, s.pods[far].rdb, "far", n, sets)

	// No node holds a connection to another's bound port: all of them
	// went through the proxies.
	bound := map[string]int{}
	var pids []int
	for i, r := range pods {
		bound[r.bindRESP], bound[r.bindRaft] = i, i
		pids = append(pids, s.pods[i].p.Cmd.Process.Pid)
	}
	conns, direct := nodeConns(t, pids, bound)
	if len(direct) > 0 {
		t.Fatalf("connections from a node straight to another node's bound port, past the proxies: %v", direct)
	}
	if conns == 0 {
		t.Fatal("no established connection found in the nodes' sockets: the check above would pass whatever they did")
	}
	describe := func(i int, l map[string][]time.Duration, retried map[string]int) string {
		return fmt.Sprintf("pod %d (zone %s, %s): NEXTID %s, INCR %s, NEXTSEG %s, SET %s; retried %v", i, zoneNames[pods[i].zone], suffrage[i],
			p50p99(l["NEXTID"]), p50p99(l["INCR"]), p50p99(l["NEXTSEG"]), p50p99(l["SET"]), retried)
	}
	waited := 0
	for _, d := range farLat["INCR"] {
		if d >= time.Duration(2*delay)*time.Millisecond {
			waited++
		}
	}

	// Failover under load: the leader alone, then (with 9 pods) the whole
	// zone of the leader after it, its network gone: every packet to it
	// dropped. Beside the load of the other tests (on "orders", which its
	// SETs keep fencing), each pod runs INCR on a tag no SET touches, and
	// NEXTID, each in a loop of its own: their gaps are the failover alone.
	h := newHistory(size)
	stop := make(chan struct{})
	wg := loadEvery(s, h, stop)
	var quietMu sync.Mutex
	quietOK := map[string][][]time.Time{"INCR": make([][]time.Time, size), "NEXTID": make([][]time.Time, size)}
	for i, p := range s.pods {
		for cmd, args := range map[string][]any{"INCR": {"INCR", "quiet"}, "NEXTID": {"NEXTID"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := p.rdb.Do(context.Background(), args...).Err(); err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					quietMu.Lock()
					quietOK[cmd][i] = append(quietOK[cmd][i], time.Now())
					quietMu.Unlock()
				}
			}()
		}
	}
	quietGap := func(cmd string, from, to time.Time, alive []int) time.Duration {
		quietMu.Lock()
		defer quietMu.Unlock()
		longest := time.Duration(0)
		for _, i := range alive {
			prev := from
			for _, at := range quietOK[cmd][i] {
				if at.After(from) && at.Before(to) {
					longest = max(longest, at.Sub(prev))
					prev = at
				}
			}
			longest = max(longest, to.Sub(prev))
		}
		return longest
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()
	var every []int
	for i := range pods {
		every = append(every, i)
	}
	wait.For(t, 20*time.Second, "every pod serves INCRs under load", h.served(every, time.Now()))
	failover := func(victims []int, waitSet bool) string {
		t.Helper()
		killed := time.Now()
		var survivors []int
		for _, i := range victims {
			dead[i] = true
			s.pods[i].p.Kill()
		}
		for i := range pods {
			if alive(i) {
				survivors = append(survivors, i)
			}
		}
		wait.For(t, 20*time.Second, "a new leader", func() (bool, string) { return s.leader(alive) >= 0, "none" })
		elected := time.Since(killed)
		firstSet := "none waited for (a member of three is not removed, and a SET waits for every member)"
		if waitSet {
			wait.For(t, 30*time.Second, "a SET acknowledged after the kill", func() (bool, string) {
				h.mu.Lock()
				defer h.mu.Unlock()
				for _, st := range h.sets {
					if st.acked.After(killed) {
						firstSet = fmt.Sprintf("%v after (once the dead were removed)", st.acked.Sub(killed).Round(time.Millisecond))
						return true, ""
					}
				}
				return false, fmt.Sprintf("errors so far %v", h.errs)
			})
		}
		// Every gap ends with the survivors' first replies under the new leader.
		since := killed.Add(elected)
		wait.For(t, 30*time.Second, "INCR and NEXTID on every survivor under the new leader", func() (bool, string) {
			if ok, why := h.served(survivors, since)(); !ok {
				return false, why
			}
			quietMu.Lock()
			defer quietMu.Unlock()
			for cmd, per := range quietOK {
				for _, i := range survivors {
					if ok := per[i]; len(ok) == 0 || !ok[len(ok)-1].After(since) {
						return false, fmt.Sprintf("pod %d: no %s on the quiet tag since", i, cmd)
					}
				}
			}
			return true, ""
		})
		now := time.Now()
		return fmt.Sprintf("a leader again after %v; longest gap on the others: INCR %v and NEXTID %v on a tag no SET touches, "+
			"INCR %v on the load's tag; first SET acknowledged %s", elected.Round(time.Millisecond),
			quietGap("INCR", killed, now, survivors).Round(time.Millisecond), quietGap("NEXTID", killed, now, survivors).Round(time.Millisecond),
			h.longestIncrGap(killed, now, survivors).Round(time.Millisecond), firstSet)
	}
	oldLeader := leader
	leaderLoss := failover([]int{leader}, size >= 9)
	lost, zoneLoss := -1, ""
	var victims []int
	var voters2 map[string]int
	if size >= 9 {
		leader, _, _ = settle("voters again after the leader was lost", 40*time.Second)
		lost = pods[leader].zone
		for i, r := range pods {
			if r.zone == lost && alive(i) {
				victims = append(victims, i)
				for _, p := range []string{r.wanRESP, r.wanRaft, r.lanRESP, r.lanRaft} {
					setup(t, "iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", p, "-j", "DROP")
				}
			}
		}
		zoneLoss = failover(victims, true)
		_, voters2, _ = settle("voters in the two zones left", 40*time.Second)
	}
	close(stop)
	wg.Wait()
	stepDowns := 0
	for _, p := range s.pods {
		stepDowns += strings.Count(p.p.Log(), "failed to contact quorum of nodes, stepping down")
	}

	var nearJoins, farJoins []time.Duration
	for i := 1; i < size; i++ {
		if pods[i].zone == pods[0].zone {
			nearJoins = append(nearJoins, joins[i])
		} else {
			farJoins = append(farJoins, joins[i])
		}
	}
	t.Logf("%d pods in zones a, b, c, --voters 5, %d ms one way between zones, %d ms inside one (toxiproxy); load average %s at the start, %s at the end",
		size, delay, inZone, loadBefore, loadAvg())
	t.Logf("arrangement: PING to pod 1's advertised address %v from its zone, %v from another; of the nodes' %d established connections, none to a peer's bound port",
		inZonePing.Round(time.Microsecond), crossZone.Round(time.Microsecond), conns)
	t.Logf("joins (start to serving, OrderedReady): pod 0 bootstrapped in %v; in pod 0's zone %v, in the other zones %v; all %d up after %v",
		joins[0].Round(time.Millisecond), roundAll(nearJoins), roundAll(farJoins), size, upAfter.Round(time.Millisecond))
	t.Logf("voters per zone %v, leader pod %d (zone %s); latency p50/p99/max, %d requests each, %d SETs, one at a time:",
		voters, oldLeader, zoneNames[pods[oldLeader].zone], n, sets)
	t.Logf("  leader's zone: %s", describe(near, nearLat, nearRetried))
	t.Logf("  other zone:    %s", describe(far, farLat, farRetried))
	if delay > 0 {
		t.Logf("  other zone: %d of %d INCRs took %d ms or more (waited for a refill from the leader)", waited, len(farLat["INCR"]), 2*delay)
	}
	t.Logf("leader pod %d killed: %s", oldLeader, leaderLoss)
	if lost >= 0 {
		t.Logf("zone %s (with the leader then, pods %v) cut off and killed: %s; voters per zone after the dead were removed: %v",
			zoneNames[lost], victims, zoneLoss, voters2)
	}
	t.Logf("leaders that stepped down for want of a quorum's contact, all pods' logs together: %d", stepDowns)
	t.Logf("under load: %d IDs, %d values, %d SETs acknowledged; duplicates %d IDs, %d values; below an acknowledged SET %d; errors %v; whole run %v",
		h.nIDs, h.nValues, len(h.sets), h.dupIDs, h.dupVals, h.belowSet(), h.errs, time.Since(began).Round(time.Second))

	if h.dupIDs > 0 || h.dupVals > 0 || h.belowSet() > 0 {
		t.Fatalf("duplicates: %d IDs, %d values; below a SET: %d", h.dupIDs, h.dupVals, h.belowSet())
	}
	if lost >= 0 && voters2[zoneNames[lost]] != 0 {
		t.Fatalf("voters per zone %v after zone %s was lost", voters2, zoneNames[lost])
	}
	if delay >= 20 {
		// A cross-zone round trip is at least 2*delay: the hot path takes
		// none, a SET from another zone at least the one to the leader.
		local := time.Duration(delay) * time.Millisecond / 4
		for _, cmd := range []string{"NEXTID", "INCR", "NEXTSEG"} {
			if p50 := median(farLat[cmd]); p50 >= local {
				t.Errorf("%s p50 on a node in a zone without the leader: %v, want far below the %d ms to another zone (under %v)", cmd, p50, delay, local)
			}
		}
		if p50 := median(farLat["SET"]); p50 < time.Duration(2*delay)*time.Millisecond {
			t.Errorf("SET p50 from a zone without the leader: %v, below one round trip to the leader's zone (%d ms): the delay is not in the path", p50, 2*delay)
		}
	}
}

// regionLatencies times n NEXTIDs, INCRs and NEXTSEGs (of 10) and sets SETs
// on rdb, one at a time, on tags of its own. A request that fails is
// retried after 20 ms, as a client does on TRYAGAIN, for at most 10 s; its
// time includes the retries, and retried counts them by command and error.
func regionLatencies(t *testing.T, rdb *redis.Client, name string, n, sets int) (map[string][]time.Duration, map[string]int) {
	t.Helper()
	ctx := context.Background()
	out, retried := map[string][]time.Duration{}, map[string]int{}
	timed := func(cmd string, args ...any) {
		began := time.Now()
		for {
			err := rdb.Do(ctx, args...).Err()
			if err == nil {
				break
			}
			if time.Since(began) > 10*time.Second {
				t.Fatalf("%s on %s: still failing after 10 s: %v", cmd, name, err)
			}
			word, _, _ := strings.Cut(err.Error(), " ")
			retried[cmd+" "+word]++
			time.Sleep(20 * time.Millisecond)
		}
		out[cmd] = append(out[cmd], time.Since(began))
	}
	for range n {
		timed("NEXTID", "NEXTID")
	}
	for range n {
		timed("INCR", "INCR", "incr-"+name)
	}
	for range n {
		timed("NEXTSEG", "NEXTSEG", "seg-"+name, 10)
	}
	high := int64(0)
	for range sets {
		high += 1000
		timed("SET", "SET", "set-"+name, high)
	}
	return out, retried
}

// p50p99 is p50/p99/max of d.
func p50p99(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	d = append([]time.Duration(nil), d...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	r := func(x time.Duration) time.Duration {
		if x < time.Millisecond {
			return x.Round(time.Microsecond)
		}
		return x.Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("%v/%v/%v", r(d[len(d)/2]), r(d[len(d)*99/100]), r(d[len(d)-1]))
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = append([]time.Duration(nil), d...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// pingFrom is the fastest of three PINGs to 127.0.0.1:port on one
// connection, sent by a shell running under group ID gid (a process of
// that zone).
func pingFrom(t *testing.T, gid int, port string) time.Duration {
	t.Helper()
	script := `exec 3<>/dev/tcp/127.0.0.1/$1 || exit 1
for i in 1 2 3; do s=$EPOCHREALTIME; printf 'PING\r\n' >&3; IFS= read -r l <&3; e=$EPOCHREALTIME; echo "${l%$'\r'} ${s/./} ${e/./}"; done`
	out, err := exec.Command("setpriv", "--regid", strconv.Itoa(gid), "--clear-groups", "--", "bash", "-c", script, "ping", port).CombinedOutput()
	if err != nil {
		t.Fatalf("PING from group %d to port %s: %v\n%s", gid, port, err, out)
	}
	best := time.Duration(-1)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "+PONG" {
			t.Fatalf("PING from group %d to port %s answered %q", gid, port, out)
		}
		s, _ := strconv.ParseInt(f[1], 10, 64)
		e, _ := strconv.ParseInt(f[2], 10, 64)
		if d := time.Duration(e-s) * time.Microsecond; best < 0 || d < best {
			best = d
		}
	}
	return best
}

// nodeConns counts the established TCP connections the processes pids
// hold, and lists those whose far end is one of the bound ports (a port ->
// its pod) of another process than the pod itself: a node that dialed a
// peer's bound address, not its advertised one.
func nodeConns(t *testing.T, pids []int, bound map[string]int) (int, []string) {
	t.Helper()
	remote := map[string]string{} // socket inode -> remote port, established only
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "01" { // 01: ESTABLISHED
				continue
			}
			_, hexPort, _ := strings.Cut(f[2], ":")
			port, err := strconv.ParseInt(hexPort, 16, 32)
			if err == nil {
				remote[f[9]] = strconv.Itoa(int(port))
			}
		}
	}
	n := 0
	var direct []string
	for pod, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatalf("pod %d (pid %d): %v", pod, pid, err)
		}
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			inode, ok := strings.CutPrefix(link, "socket:[")
			if err != nil || !ok {
				continue
			}
			port, ok := remote[strings.TrimSuffix(inode, "]")]
			if !ok {
				continue
			}
			n++
			if to, isBound := bound[port]; isBound && to != pod {
				direct = append(direct, fmt.Sprintf("pod %d to pod %d's port %s", pod, to, port))
			}
		}
	}
	return n, direct
}

// loopbackUp brings up lo, which a new network namespace has down.
func loopbackUp(t *testing.T) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err == nil {
		err = unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr)
	}
	if err == nil {
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
		err = unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	}
	if err != nil {
		t.Fatalf("bringing lo up: %v", err)
	}
}

// setup runs a command of the test's setup, failing the test if it fails.
func setup(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
