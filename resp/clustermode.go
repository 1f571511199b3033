package resp

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/redcon"
)

// Emulated Redis Cluster, with Config.EmulateCluster (--cluster-mode
// emulated; without it these commands are refused as a Redis without
// cluster support refuses them, so that a client that tries cluster mode
// first, as rueidis does, falls back to one node).
//
// A client configured for Redis Cluster (go-redis NewClusterClient,
// rueidis, redis-py RedisCluster, ioredis Cluster) asks a node for the slot
// map and sends each key's commands to the slot's master. Every node serves
// every tag, so any map would do; the one every node answers splits the
// 16384 slots into contiguous ranges over the live members, in node-ID
// order, each member the master of one range, with no replicas:
//
//   - Every node answers the same map (the members are the replicated
//     member list, the same on every node, and a member is live when this
//     node reaches its RESP port, which on a healthy network every node
//     sees alike). So a client sends one tag's commands to one node
//     however often it refreshes and from whichever node, and that tag's
//     INCRs answer increasing values, as from Redis. A map naming the
//     answering node the master of every slot (Dragonfly's emulation)
//     differs from node to node: a client that refreshes its map from
//     another node (go-redis every 10 s, from one picked at random) moves
//     its tags to that node, whose buffered values of a tag may lie below
//     the ones it had, and a counter goes back.
//   - Tags spread over the nodes, as do commands without a key, which
//     clients send to a random slot.
//   - When a node dies, the live nodes stop naming it: its range is split
//     with the others' over the members left, and a client's own refresh
//     (on its connection's failure, or its periodic one) from any live node
//     it knows (the map named them all) sends the range's tags to live
//     nodes. A tag's values then come from a segment the new node takes
//     above every value issued, so they still increase.
//
// A command on a key whose slot this node's map gives another member is
// answered MOVED, as Redis Cluster answers it (never ASK: no slot
// migrates). ioredis sends the commands of a slot whose master it has
// dropped to a random node and counts on MOVED to send them on and to
// refresh its map; served there instead, a tag's INCRs would interleave
// two nodes' segments and go back, for as long as ioredis keeps the map. The
// map a MOVED is decided by is this node's last, at most slotMapTTL old.

// clusterSlots is the number of hash slots of Redis Cluster.
const clusterSlots = 16384

// clusterModeCommands are the commands a cluster client sends beside CLUSTER.
func clusterModeCommands() []*command {
	return []*command{
		{name: "readonly", arity: 1, flags: []string{"fast"}, summary: "+OK: every node serves reads (cluster clients send it to replicas)", handler: cmdClusterOK},
		{name: "readwrite", arity: 1, flags: []string{"fast"}, summary: "+OK", handler: cmdClusterOK},
		{name: "asking", arity: 1, flags: []string{"fast"}, summary: "+OK: no slot ever migrates", handler: cmdClusterOK},
	}
}

// errClusterDisabled is Redis's refusal of cluster commands without
// cluster support, and what turns it on here.
// redisMode is the mode HELLO and INFO name, as Redis names its own:
// "cluster" in the emulated cluster mode, "standalone" otherwise.
func (s *Server) redisMode() string {
	if s.cfg.EmulateCluster {
		return "cluster"
	}
	return "standalone"
}

const errClusterDisabled = "ERR This instance has cluster support disabled (idserver: start every node with --cluster-mode emulated for Redis Cluster clients)"

func cmdClusterOK(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if !s.cfg.EmulateCluster {
		s.errorReply(conn, errClusterDisabled)
		return
	}
	conn.WriteString("OK")
}

// member is a node as the cluster-mode and Sentinel replies name it.
type member struct {
	nodeID string
	host   string
	port   int
	self   bool
}

// addr is host:port.
func (m member) addr() string { return net.JoinHostPort(m.host, strconv.Itoa(m.port)) }

// hexID is the member's 40-hex-digit ID in CLUSTER NODES and MYID: the
// SHA-1 of its node ID, so it is the same on every node and across restarts.
func (m member) hexID() string { return hexNodeID(m.nodeID) }

func hexNodeID(nodeID string) string {
	sum := sha1.Sum([]byte(nodeID))
	return hex.EncodeToString(sum[:])
}

// members is this node, first, and the other members that are live: each
// with the RESP address it advertises, read from the cluster's status
// (CLUSTER INFO's member lines), less those whose RESP port this node
// cannot reach (probes). The leader's health view is not asked: it is the
// leader's, copied to the others now and then, and after the leader dies
// the new one calls members unhealthy until it hears from them, so two
// nodes would answer different maps. This node's own address is the one it advertises, or the
// address the client reached it at when it advertises none it can be
// reached at (an unspecified host such as 0.0.0.0).
func (s *Server) members(c *client) []member {
	self := member{nodeID: s.cfg.NodeID, self: true}
	var others []member
	if s.cfg.Cluster != nil {
		for _, kv := range s.cfg.Cluster.Info() {
			if !strings.HasPrefix(kv[0], "member") || kv[0] == "members" || kv[0] == "member_list" {
				continue
			}
			f := map[string]string{}
			for _, field := range strings.Split(kv[1], ",") {
				if k, v, ok := strings.Cut(field, "="); ok {
					f[k] = v
				}
			}
			host, port, ok := splitHostPort(f["resp"])
			switch {
			case f["id"] == s.cfg.NodeID:
				if ok {
					self.host, self.port = host, port
				}
			case ok:
				others = append(others, member{nodeID: f["id"], host: host, port: port})
			}
		}
	}
	others = s.probes.reachable(others)
	if ip := net.ParseIP(self.host); self.host == "" || (ip != nil && ip.IsUnspecified()) {
		if host, port, ok := splitHostPort(c.conn.LocalAddr().String()); ok {
			self.host, self.port = host, port
		}
	}
	return append([]member{self}, others...)
}

func splitHostPort(addr string) (string, int, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, false
	}
	return host, port, true
}

// clusterMode answers the Redis Cluster subcommands of CLUSTER; false when
// sub is not one of them.
func (s *Server) clusterMode(c *client, conn redcon.Conn, sub string, args [][]byte) bool {
	switch sub {
	case "slots", "shards", "nodes", "myid", "myshardid", "keyslot", "countkeysinslot", "getkeysinslot":
		if !s.cfg.EmulateCluster {
			s.errorReply(conn, errClusterDisabled)
			return true
		}
	}
	switch sub {
	case "slots":
		s.clusterSlotsReply(c, conn)
	case "shards":
		s.clusterShardsReply(c, conn)
	case "nodes":
		s.clusterNodesReply(c, conn)
	case "myid":
		conn.WriteBulkString(hexNodeID(s.cfg.NodeID))
	case "myshardid":
		conn.WriteBulkString(hexNodeID(s.cfg.NodeID))
	case "keyslot":
		conn.WriteInt(keySlot(args[2]))
	case "countkeysinslot", "getkeysinslot":
		slot, ok := parseInt64(args[2])
		if !ok || slot < 0 || slot >= clusterSlots {
			s.errorReply(conn, "ERR Invalid slot")
			return true
		}
		limit := int64(-1)
		if sub == "getkeysinslot" {
			if limit, ok = parseInt64(args[3]); !ok || limit < 0 {
				s.errorReply(conn, "ERR Invalid number of keys")
				return true
			}
		}
		tags := s.tagsInSlot(int(slot), limit)
		if sub == "countkeysinslot" {
			conn.WriteInt(len(tags))
			return true
		}
		conn.WriteArray(len(tags))
		for _, t := range tags {
			conn.WriteBulkString(t)
		}
	default:
		return false
	}
	return true
}

// tagsInSlot lists the tags whose key slot is slot, at most limit of them
// (no bound when limit < 0): a pass over every tag.
func (s *Server) tagsInSlot(slot int, limit int64) []string {
	var out []string
	var cursor uint64
	for {
		next, tags := s.cfg.Cluster.ScanTags(cursor, 1000)
		for _, t := range tags {
			if limit >= 0 && int64(len(out)) >= limit {
				return out
			}
			if keySlot([]byte(t)) == slot {
				out = append(out, t)
			}
		}
		if next == 0 {
			return out
		}
		cursor = next
	}
}

// slotMapTTL is how long the map MOVED is decided by is kept.
const slotMapTTL = 100 * time.Millisecond

// slotMap is this node's last map, for MOVED.
type slotMap struct {
	at     time.Time
	ranges []slotRange
}

// movedTo is the address of the member the map gives slot to, "" when it
// is this node (or no map could be made). A map older than slotMapTTL is
// made again by one caller at a time; the others use the old one.
func (s *Server) movedTo(c *client, slot int) string {
	m := s.slotMap.Load()
	if (m == nil || time.Since(m.at) > slotMapTTL) && s.slotMapMu.TryLock() {
		m = &slotMap{at: time.Now(), ranges: slotRanges(s.members(c))}
		s.slotMap.Store(m)
		s.slotMapMu.Unlock()
	}
	if m == nil {
		return ""
	}
	for _, r := range m.ranges {
		if r.first <= slot && slot <= r.last {
			if r.m.self {
				return ""
			}
			return r.m.addr()
		}
	}
	return ""
}

// moved answers Redis Cluster's redirection of a command on a key whose
// slot another member serves (refused as an unknown command is: inside
// MULTI, EXEC then aborts), and reports whether it did.
func (s *Server) moved(c *client, conn redcon.Conn, def *command, args [][]byte) bool {
	if def.keys[0] <= 0 || def.keys[0] >= len(args) {
		return false
	}
	slot := keySlot(args[def.keys[0]])
	addr := s.movedTo(c, slot)
	if addr == "" {
		return false
	}
	s.refuse(c, conn, "MOVED "+strconv.Itoa(slot)+" "+addr)
	return true
}

// slotRange is a member and the slots it is the master of.
type slotRange struct {
	first, last int
	m           member
}

// slotRanges splits the slots over ms in node-ID order: the same on every
// node that sees the same live members.
func slotRanges(ms []member) []slotRange {
	sorted := slices.Clone(ms)
	slices.SortFunc(sorted, func(a, b member) int { return strings.Compare(a.nodeID, b.nodeID) })
	out := make([]slotRange, len(sorted))
	for i, m := range sorted {
		out[i] = slotRange{first: i * clusterSlots / len(sorted), last: (i+1)*clusterSlots/len(sorted) - 1, m: m}
	}
	return out
}

// clusterSlotsReply: a range per live member, its only node the member, as
// Redis 7 writes a node: ip, port, ID and an empty map of further endpoints.
func (s *Server) clusterSlotsReply(c *client, conn redcon.Conn) {
	ranges := slotRanges(s.members(c))
	s.slotMap.Store(&slotMap{at: time.Now(), ranges: ranges})
	conn.WriteArray(len(ranges))
	for _, r := range ranges {
		conn.WriteArray(3)
		conn.WriteInt(r.first)
		conn.WriteInt(r.last)
		conn.WriteArray(4)
		conn.WriteBulkString(r.m.host)
		conn.WriteInt(r.m.port)
		conn.WriteBulkString(r.m.hexID())
		writeMap(conn, c, 0)
	}
}

// clusterShardsReply: a shard per live member, the member its master.
func (s *Server) clusterShardsReply(c *client, conn redcon.Conn) {
	ranges := slotRanges(s.members(c))
	conn.WriteArray(len(ranges))
	for _, r := range ranges {
		writeMap(conn, c, 2)
		conn.WriteBulkString("slots")
		conn.WriteArray(2)
		conn.WriteInt(r.first)
		conn.WriteInt(r.last)
		conn.WriteBulkString("nodes")
		conn.WriteArray(1)
		writeMap(conn, c, 7)
		conn.WriteBulkString("id")
		conn.WriteBulkString(r.m.hexID())
		conn.WriteBulkString("port")
		conn.WriteInt(r.m.port)
		conn.WriteBulkString("ip")
		conn.WriteBulkString(r.m.host)
		conn.WriteBulkString("endpoint")
		conn.WriteBulkString(r.m.host)
		conn.WriteBulkString("role")
		conn.WriteBulkString("master")
		conn.WriteBulkString("replication-offset")
		conn.WriteInt(0)
		conn.WriteBulkString("health")
		conn.WriteBulkString("online")
	}
}

// clusterNodesReply: Redis's CLUSTER NODES lines, every live member a
// master of its range, this one flagged myself.
func (s *Server) clusterNodesReply(c *client, conn redcon.Conn) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var b strings.Builder
	for i, r := range slotRanges(s.members(c)) {
		flags, pong := "master", now
		if r.m.self {
			flags, pong = "myself,master", "0"
		}
		fmt.Fprintf(&b, "%s %s@0 %s - 0 %s %d connected %d-%d\n", r.m.hexID(), r.m.addr(), flags, pong, i+1, r.first, r.last)
	}
	conn.WriteBulkString(b.String())
}

// clusterInfoLines are Redis's own CLUSTER INFO lines, before idserver's,
// in the emulated cluster mode: cluster_state is ok while a leader is
// known (fail otherwise: this node cannot reach a quorum, and its commands
// that need one answer TRYAGAIN).
func (s *Server) clusterInfoLines(c *client) []string {
	if !s.cfg.EmulateCluster {
		return nil
	}
	n := len(s.members(c))
	state := "ok"
	if _, ok := s.cfg.Cluster.Leader(); !ok {
		state = "fail"
	}
	return []string{
		kv("cluster_state", state),
		kv("cluster_slots_assigned", clusterSlots),
		kv("cluster_slots_ok", clusterSlots),
		kv("cluster_slots_pfail", 0),
		kv("cluster_slots_fail", 0),
		kv("cluster_known_nodes", n),
		kv("cluster_size", n),
	}
}

// keySlot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of the key,
// or of its hash tag (what lies between the first '{' and the first '}'
// after it, when not empty), mod 16384.
func keySlot(key []byte) int {
	if i := strings.IndexByte(string(key), '{'); i >= 0 {
		if j := strings.IndexByte(string(key[i+1:]), '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) & (clusterSlots - 1)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// probes keeps whether each other member's RESP port answered a
// connection: CLUSTER SLOTS and SENTINEL name only members this node
// reaches. A member that answered is probed again after probeTTL, short
// enough that right after a member dies every node stops naming it within
// a few milliseconds of the others (two nodes answering different maps
// could send a client's tag from one node to the other and back); one that
// did not answer, after deadProbeTTL, which bounds how long a member that
// restarts waits to be named again.
type probes struct {
	mu   sync.Mutex
	seen map[string]probe
}

type probe struct {
	at time.Time
	ok bool
}

func (pr probe) fresh(now time.Time) bool {
	if pr.ok {
		return now.Sub(pr.at) < probeTTL
	}
	return now.Sub(pr.at) < deadProbeTTL
}

const (
	probeTTL     = 20 * time.Millisecond
	deadProbeTTL = time.Second
	probeTimeout = 300 * time.Millisecond // a connection's wait
)

// reachable is ms less the members whose RESP port refused a connection
// or did not accept one within probeTimeout, probed all at once.
func (p *probes) reachable(ms []member) []member {
	now := time.Now()
	ok := make([]bool, len(ms))
	var wg sync.WaitGroup
	p.mu.Lock()
	if p.seen == nil {
		p.seen = map[string]probe{}
	}
	for i, m := range ms {
		if pr, found := p.seen[m.addr()]; found && pr.fresh(now) {
			ok[i] = pr.ok
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.DialTimeout("tcp", m.addr(), probeTimeout)
			if err == nil {
				conn.Close()
			}
			ok[i] = err == nil
		}()
	}
	p.mu.Unlock()
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []member
	for i, m := range ms {
		if pr, found := p.seen[m.addr()]; !found || !pr.fresh(now) {
			p.seen[m.addr()] = probe{at: now, ok: ok[i]}
		}
		if ok[i] {
			out = append(out, m)
		}
	}
	return out
}
