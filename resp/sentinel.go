package resp

import (
	"strconv"
	"strings"

	"github.com/tidwall/redcon"
)

// Sentinel answered by every node. A client configured for Redis Sentinel
// (go-redis NewFailoverClient, redis-py Sentinel, ioredis sentinels) asks a
// sentinel for the master's address, connects there, and when that
// connection fails asks again, trying the next sentinel it knows when its
// sentinel does not answer. Every node is a sentinel, and names itself as
// the master: the sentinel a client asked and the master it named are one
// process, so when the master dies the client's sentinel is gone with it,
// and the next sentinel it tries, a live node, names itself. No failover
// is ever announced (+switch-master is never published): from any live
// sentinel's view its master never changes. The other live members are
// its replicas and the other sentinels (SENTINEL REPLICAS, SENTINEL
// SENTINELS), so a client that was given one sentinel learns the rest.
//
// Any master name is accepted by the subcommands that take one (every node
// serves every tag, so every name means this cluster); SENTINEL MASTERS,
// which names the masters, lists Config.SentinelMasters.

// DefaultSentinelMaster is the master name SENTINEL MASTERS lists when
// Config.SentinelMasters is empty: the name Redis's own examples use.
const DefaultSentinelMaster = "mymaster"

// sentinelCommands are SENTINEL and ROLE.
func sentinelCommands() []*command {
	return []*command{
		{name: "sentinel", arity: -2, subs: map[string]int{"help": 2, "get-master-addr-by-name": 3, "masters": 2, "master": 3,
			"replicas": 3, "slaves": 3, "sentinels": 3, "ckquorum": 3, "myid": 2},
			flags: []string{"admin"}, summary: "Redis Sentinel's queries: every node names itself the master (see docs/clients.md)", handler: cmdSentinel},
		{name: "role", arity: 1, flags: []string{"fast"}, summary: "master, with the other live members as replicas", handler: cmdRole},
	}
}

// sentinelMasters are the names SENTINEL MASTERS lists.
func (s *Server) sentinelMasters() []string {
	if len(s.cfg.SentinelMasters) == 0 {
		return []string{DefaultSentinelMaster}
	}
	return s.cfg.SentinelMasters
}

func cmdSentinel(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	ms := s.members(c)
	self, others := ms[0], ms[1:]
	switch strings.ToLower(string(args[1])) {
	case "get-master-addr-by-name":
		conn.WriteArray(2)
		conn.WriteBulkString(self.host)
		conn.WriteBulkString(strconv.Itoa(self.port))
	case "masters":
		names := s.sentinelMasters()
		conn.WriteArray(len(names))
		for _, name := range names {
			writePairs(conn, c, masterState(name, self, len(ms)))
		}
	case "master":
		writePairs(conn, c, masterState(string(args[2]), self, len(ms)))
	case "replicas", "slaves":
		conn.WriteArray(len(others))
		for _, m := range others {
			writePairs(conn, c, replicaState(m, self))
		}
	case "sentinels":
		conn.WriteArray(len(others))
		for _, m := range others {
			writePairs(conn, c, sentinelState(m))
		}
	case "ckquorum":
		conn.WriteString("OK " + strconv.Itoa(len(ms)) + " usable Sentinels. Quorum and failover authorization can be reached")
	case "myid":
		conn.WriteBulkString(self.hexID())
	}
}

// cmdRole answers as a Redis master: its replication offset (0) and its
// replicas, the other live members.
func cmdRole(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	others := s.members(c)[1:]
	conn.WriteArray(3)
	conn.WriteBulkString("master")
	conn.WriteInt(0)
	conn.WriteArray(len(others))
	for _, m := range others {
		conn.WriteArray(3)
		conn.WriteBulkString(m.host)
		conn.WriteBulkString(strconv.Itoa(m.port))
		conn.WriteBulkString("0")
	}
}

// writePairs writes field-value pairs as Sentinel does: a map (a flat array
// in RESP2) of bulk strings.
func writePairs(conn redcon.Conn, c *client, pairs [][2]string) {
	writeMap(conn, c, len(pairs))
	for _, p := range pairs {
		conn.WriteBulkString(p[0])
		conn.WriteBulkString(p[1])
	}
}

// masterState is Sentinel's description of a master: this node, with the
// other live members as its replicas and its fellow sentinels.
func masterState(name string, self member, nodes int) [][2]string {
	return [][2]string{
		{"name", name}, {"ip", self.host}, {"port", strconv.Itoa(self.port)}, {"runid", self.hexID()}, {"flags", "master"},
		{"link-pending-commands", "0"}, {"link-refcount", "1"}, {"last-ping-sent", "0"}, {"last-ok-ping-reply", "0"},
		{"last-ping-reply", "0"}, {"down-after-milliseconds", "30000"}, {"info-refresh", "0"}, {"role-reported", "master"},
		{"role-reported-time", "0"}, {"config-epoch", "0"}, {"num-slaves", strconv.Itoa(nodes - 1)},
		{"num-other-sentinels", strconv.Itoa(nodes - 1)}, {"quorum", strconv.Itoa(nodes/2 + 1)},
		{"failover-timeout", "180000"}, {"parallel-syncs", "1"},
	}
}

// replicaState is Sentinel's description of a replica of master.
func replicaState(m, master member) [][2]string {
	return [][2]string{
		{"name", m.addr()}, {"ip", m.host}, {"port", strconv.Itoa(m.port)}, {"runid", m.hexID()}, {"flags", "slave"},
		{"link-pending-commands", "0"}, {"link-refcount", "1"}, {"last-ping-sent", "0"}, {"last-ok-ping-reply", "0"},
		{"last-ping-reply", "0"}, {"down-after-milliseconds", "30000"}, {"info-refresh", "0"}, {"role-reported", "slave"},
		{"role-reported-time", "0"}, {"master-link-down-time", "0"}, {"master-link-status", "ok"},
		{"master-host", master.host}, {"master-port", strconv.Itoa(master.port)}, {"slave-priority", "100"},
		{"slave-repl-offset", "0"}, {"replica-announced", "1"},
	}
}

// sentinelState is Sentinel's description of a fellow sentinel.
func sentinelState(m member) [][2]string {
	return [][2]string{
		{"name", m.hexID()}, {"ip", m.host}, {"port", strconv.Itoa(m.port)}, {"runid", m.hexID()}, {"flags", "sentinel"},
		{"link-pending-commands", "0"}, {"link-refcount", "1"}, {"last-ping-sent", "0"}, {"last-ok-ping-reply", "0"},
		{"last-ping-reply", "0"}, {"down-after-milliseconds", "30000"}, {"last-hello-message", "0"},
		{"voted-leader", "?"}, {"voted-leader-epoch", "0"},
	}
}
