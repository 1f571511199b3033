package resp

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestKeySlotIsRedisClusters: CLUSTER KEYSLOT answers the slots Redis 7.0
// with --cluster-enabled yes answers, hash tags (and empty ones) included.
func TestKeySlotIsRedisClusters(t *testing.T) {
	for key, want := range map[string]int{"somekey": 11058, "foo{hash_tag}": 2515, "foo": 12182, "{}foo": 9500, "a{}{b}": 15033} {
		if got := keySlot([]byte(key)); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot([]byte("{user1000}.following")) != keySlot([]byte("{user1000}.followers")) {
		t.Error("a hash tag does not decide the slot")
	}
}

// fourMembers is a fake cluster of four members besides this node (n1):
// n2, n3 and n4 listening (n4 failed in the leader's view), n5 healthy
// but not listening.
type fourMembers struct {
	*fakeCluster
	self, n2, n3, n4, n5 string
}

func (f fourMembers) Info() [][2]string {
	return [][2]string{{"node_id", "n1"}, {"role", "Leader"}, {"members", "5"},
		{"member0", "id=n1,worker=0,resp=" + f.self + ",raft=127.0.0.1:2,suffrage=voter,health=healthy"},
		{"member1", "id=n2,worker=1,resp=" + f.n2 + ",raft=127.0.0.1:3,suffrage=voter,health=healthy"},
		{"member2", "id=n3,worker=2,resp=" + f.n3 + ",raft=127.0.0.1:4,suffrage=voter,health=unknown"},
		{"member3", "id=n4,worker=3,resp=" + f.n4 + ",raft=127.0.0.1:5,suffrage=voter,health=failed"},
		{"member4", "id=n5,worker=4,resp=" + f.n5 + ",raft=127.0.0.1:6,suffrage=voter,health=healthy"},
	}
}

// newFourMembers is fourMembers around this node's address, the others on
// loopback: n2, n3 and n4 listening, n5's port closed.
func newFourMembers(t *testing.T, self string) fourMembers {
	listen := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln.Addr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	return fourMembers{fakeCluster: newFakeCluster(), self: self, n2: listen(), n3: listen(), n4: listen(), n5: closed}
}

// TestClusterModeSplitsTheSlotsOverLiveMembers: CLUSTER SLOTS, SHARDS and
// NODES as go-redis parses them: the slots split in node-ID order over
// this node and the members it reaches (n2, n3, n4: whatever the leader's
// health view says), each the only node of its range; MYID is 40 hex digits;
// CLUSTER INFO starts with Redis's own lines.
func TestClusterModeSplitsTheSlotsOverLiveMembers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	f := newFourMembers(t, addr)
	serveT(t, Config{NodeID: "n1", EmulateCluster: true, Cluster: f}, ln)
	for _, proto := range []int{2, 3} {
		c := newClient(t, addr, proto, "")
		ctx := context.Background()
		if text, err := c.Info(ctx, "cluster", "server").Result(); err != nil || !strings.Contains(text, "cluster_enabled:1\r\n") ||
			!strings.Contains(text, "redis_mode:cluster\r\n") {
			t.Fatalf("INFO cluster server: %v\n%s", err, text)
		}
		if hello, err := c.Do(ctx, "HELLO", "2").Slice(); err != nil || !slices.Contains(hello, any("cluster")) {
			t.Fatalf("HELLO: %v %v", hello, err)
		}
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			first, last int
			addr        string
		}{{0, 4095, addr}, {4096, 8191, f.n2}, {8192, 12287, f.n3}, {12288, 16383, f.n4}}
		if len(slots) != len(want) {
			t.Fatalf("RESP%d CLUSTER SLOTS: %+v", proto, slots)
		}
		for i, w := range want {
			if s := slots[i]; s.Start != w.first || s.End != w.last || len(s.Nodes) != 1 || s.Nodes[0].Addr != w.addr || len(s.Nodes[0].ID) != 40 {
				t.Fatalf("RESP%d CLUSTER SLOTS range %d: %+v, want %+v", proto, i, s, w)
			}
		}
		myID, err := c.ClusterMyID(ctx).Result()
		if err != nil || myID != slots[0].Nodes[0].ID {
			t.Fatalf("CLUSTER MYID %q, %v; SLOTS names %q", myID, err, slots[0].Nodes[0].ID)
		}
		shards, err := c.ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(shards) != 4 || len(shards[1].Slots) != 1 || shards[1].Slots[0].Start != 4096 || len(shards[1].Nodes) != 1 ||
			shards[0].Nodes[0].Role != "master" || shards[0].Nodes[0].Port != int64(portOf(t, addr)) || shards[2].Nodes[0].Health != "online" {
			t.Fatalf("RESP%d CLUSTER SHARDS: %+v", proto, shards)
		}
		text, err := c.ClusterNodes(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(text), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], myID+" "+addr+"@0 myself,master - ") || !strings.HasSuffix(lines[0], " connected 0-4095") ||
			!strings.Contains(lines[2], " "+f.n3+"@0 master - ") || !strings.HasSuffix(lines[2], " connected 8192-12287") {
			t.Fatalf("CLUSTER NODES:\n%s", text)
		}
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil || !strings.HasPrefix(info, "cluster_state:ok\r\ncluster_slots_assigned:16384\r\n") || !strings.Contains(info, "cluster_known_nodes:4\r\n") ||
			!strings.Contains(info, "cluster_size:4\r\n") || !strings.Contains(info, "\r\nnode_id:n1\r\n") {
			t.Fatalf("CLUSTER INFO: %v\n%s", err, info)
		}
		if n, err := c.ClusterKeySlot(ctx, "somekey").Result(); err != nil || n != 11058 {
			t.Fatalf("CLUSTER KEYSLOT somekey: %d, %v", n, err)
		}
		for _, cmd := range [][]any{{"READONLY"}, {"READWRITE"}, {"ASKING"}} {
			if err := c.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
		// A tag of n2's range is sent there, inside MULTI too (EXEC then
		// aborts); one of this node's is served.
		var theirs, ours string
		for i := 0; theirs == "" || ours == ""; i++ {
			k := "k" + strconv.Itoa(i)
			switch slot := keySlot([]byte(k)); {
			case slot >= 4096 && slot <= 8191:
				theirs = k
			case slot <= 4095:
				ours = k
			}
		}
		moved := "MOVED " + strconv.Itoa(keySlot([]byte(theirs))) + " " + f.n2
		if err := c.Set(ctx, theirs, 5, 0).Err(); err == nil || err.Error() != moved {
			t.Fatalf("RESP%d SET %s: %v, want %s", proto, theirs, err, moved)
		}
		if err := c.Set(ctx, ours, 5, 0).Err(); err != nil {
			t.Fatalf("RESP%d SET %s: %v", proto, ours, err)
		}
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, theirs); return nil }); err == nil || !strings.HasPrefix(err.Error(), "EXECABORT") {
			t.Fatalf("RESP%d MULTI GET %s EXEC: %v", proto, theirs, err)
		}
	}
}

func portOf(t *testing.T, addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCountKeysInSlot: CLUSTER COUNTKEYSINSLOT and GETKEYSINSLOT over tags.
func TestCountKeysInSlot(t *testing.T) {
	addr := startServer(t, Config{NodeID: "n1", Cluster: newFakeCluster(), EmulateCluster: true})
	c := newClient(t, addr, 2, "")
	ctx := context.Background()
	for _, tag := range []string{"{a}1", "{a}2", "b"} {
		if err := c.Set(ctx, tag, 5, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := keySlot([]byte("a"))
	if n, err := c.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 2 {
		t.Fatalf("COUNTKEYSINSLOT %d: %d, %v", slot, n, err)
	}
	if keys, err := c.ClusterGetKeysInSlot(ctx, slot, 1).Result(); err != nil || len(keys) != 1 || keys[0] != "{a}1" {
		t.Fatalf("GETKEYSINSLOT %d 1: %v, %v", slot, keys, err)
	}
	if err := c.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", "16384").Err(); err == nil || err.Error() != "ERR Invalid slot" {
		t.Fatalf("COUNTKEYSINSLOT 16384: %v", err)
	}
}

// TestSentinelNamesTheAnsweringNode: every name gets this node's address;
// MASTERS lists the configured names; REPLICAS and SENTINELS the live
// members (n2, n3, n4: not n5, not listening); ROLE is a master's.
func TestSentinelNamesTheAnsweringNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	f := newFourMembers(t, addr)
	serveT(t, Config{NodeID: "n1", SentinelMasters: []string{"ids", "orders"}, Cluster: f}, ln)
	for _, proto := range []int{2, 3} {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Protocol: proto})
		defer sc.Close()
		ctx := context.Background()
		for _, name := range []string{"ids", "anything"} {
			got, err := sc.GetMasterAddrByName(ctx, name).Result()
			if err != nil || len(got) != 2 || net.JoinHostPort(got[0], got[1]) != addr {
				t.Fatalf("RESP%d get-master-addr-by-name %s: %v, %v", proto, name, got, err)
			}
		}
		masters, err := sc.Masters(ctx).Result()
		if err != nil || len(masters) != 2 {
			t.Fatalf("RESP%d SENTINEL MASTERS: %v, %v", proto, masters, err)
		}
		m, err := sc.Master(ctx, "orders").Result()
		if err != nil || m["name"] != "orders" || m["flags"] != "master" || m["num-other-sentinels"] != "3" || m["quorum"] != "3" {
			t.Fatalf("RESP%d SENTINEL MASTER: %v, %v", proto, m, err)
		}
		replicas, err := sc.Replicas(ctx, "orders").Result()
		if err != nil || len(replicas) != 3 || net.JoinHostPort(replicas[0]["ip"], replicas[0]["port"]) != f.n2 || net.JoinHostPort(replicas[1]["ip"], replicas[1]["port"]) != f.n3 || replicas[0]["flags"] != "slave" {
			t.Fatalf("RESP%d SENTINEL REPLICAS: %v, %v", proto, replicas, err)
		}
		sentinels, err := sc.Sentinels(ctx, "orders").Result()
		if err != nil || len(sentinels) != 3 || net.JoinHostPort(sentinels[1]["ip"], sentinels[1]["port"]) != f.n3 {
			t.Fatalf("RESP%d SENTINEL SENTINELS: %v, %v", proto, sentinels, err)
		}
		if q, err := sc.CkQuorum(ctx, "orders").Result(); err != nil || !strings.HasPrefix(q, "OK 4 usable Sentinels") {
			t.Fatalf("RESP%d SENTINEL CKQUORUM: %q, %v", proto, q, err)
		}
		role, err := newClient(t, addr, proto, "").Do(ctx, "ROLE").Slice()
		if err != nil || len(role) != 3 || role[0] != "master" || len(role[2].([]any)) != 3 {
			t.Fatalf("RESP%d ROLE: %v, %v", proto, role, err)
		}
	}
}

// TestSubscribeAsRedis: confirmations, PING and the refusal of other
// commands in RESP2's subscribed context, pushes in RESP3, channels that
// cannot be Sentinel's refused, RESET dropping the subscriptions.
func TestSubscribeAsRedis(t *testing.T) {
	addr := startServer(t, Config{NodeID: "n1"})
	conn, rd := dial(t, addr)
	expect := func(want ...string) {
		t.Helper()
		for _, w := range want {
			if got := readLine(t, rd); got != w {
				t.Fatalf("got %q, want %q", got, w)
			}
		}
	}
	send(t, conn, "SUBSCRIBE +switch-master +replica-reconf-done\r\n")
	expect("*3", "$9", "subscribe", "$14", "+switch-master", ":1", "*3", "$9", "subscribe", "$20", "+replica-reconf-done", ":2")
	send(t, conn, "PSUBSCRIBE *\r\nPING\r\nPING x\r\nNEXTID\r\n")
	expect("*3", "$10", "psubscribe", "$1", "*", ":3", "*2", "$4", "pong", "$0", "", "*2", "$4", "pong", "$1", "x",
		"-ERR Can't execute 'nextid': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
	for _, refused := range []string{"SUBSCRIBE orders", "PSUBSCRIBE \\*", "PSUBSCRIBE o*"} {
		send(t, conn, refused+"\r\n")
		if got := readLine(t, rd); !strings.HasPrefix(got, "-ERR idserver publishes no messages") {
			t.Fatalf("%s: %q", refused, got)
		}
	}
	send(t, conn, "PSUBSCRIBE \\+*\r\n") // Redis's glob escape: the channels that begin with +
	expect("*3", "$10", "psubscribe", "$3", "\\+*", ":4")
	send(t, conn, "UNSUBSCRIBE\r\nPUNSUBSCRIBE\r\nUNSUBSCRIBE\r\nPING\r\n")
	expect("*3", "$11", "unsubscribe", "$14", "+switch-master", ":3", "*3", "$11", "unsubscribe", "$20", "+replica-reconf-done", ":2",
		"*3", "$12", "punsubscribe", "$1", "*", ":1", "*3", "$12", "punsubscribe", "$3", "\\+*", ":0",
		"*3", "$11", "unsubscribe", "$-1", ":0", "+PONG")

	send(t, conn, "HELLO 3\r\n")
	line := readLine(t, rd)
	n, _ := strconv.Atoi(line[1:])
	drainMap(t, rd, n)
	send(t, conn, "SUBSCRIBE +switch-master\r\nPING\r\nUNSUBSCRIBE +odown\r\nSUBSCRIBE -sdown\r\nRESET\r\nPING\r\n")
	expect(">3", "$9", "subscribe", "$14", "+switch-master", ":1", "+PONG", ">3", "$11", "unsubscribe", "$6", "+odown", ":1",
		">3", "$9", "subscribe", "$6", "-sdown", ":2", "+RESET", "+PONG")
}

// TestClusterModeOffRefusesAsRedis: without EmulateCluster the cluster-mode
// commands answer what a Redis without cluster support answers (naming the
// flag), which is what sends rueidis back to one node, and INFO says
// cluster_enabled:0.
func TestClusterModeOffRefusesAsRedis(t *testing.T) {
	addr := startServer(t, Config{NodeID: "n1", Cluster: newFakeCluster()})
	c := newClient(t, addr, 2, "")
	ctx := context.Background()
	for _, cmd := range [][]any{{"CLUSTER", "SLOTS"}, {"CLUSTER", "SHARDS"}, {"CLUSTER", "NODES"}, {"CLUSTER", "MYID"}, {"CLUSTER", "KEYSLOT", "a"},
		{"CLUSTER", "COUNTKEYSINSLOT", "1"}, {"READONLY"}, {"READWRITE"}, {"ASKING"}} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR This instance has cluster support disabled") ||
			!strings.Contains(err.Error(), "--cluster-mode emulated") {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	if text, err := c.Info(ctx, "cluster").Result(); err != nil || !strings.Contains(text, "cluster_enabled:0\r\n") {
		t.Fatalf("INFO cluster: %v\n%s", err, text)
	}
	if text, err := c.Info(ctx, "server").Result(); err != nil || !strings.Contains(text, "redis_mode:standalone\r\n") {
		t.Fatalf("INFO server: %v\n%s", err, text)
	}
	if hello, err := c.Do(ctx, "HELLO", "2").Slice(); err != nil || !slices.Contains(hello, any("standalone")) {
		t.Fatalf("HELLO: %v %v", hello, err)
	}
	if text, err := c.ClusterInfo(ctx).Result(); err != nil || strings.Contains(text, "cluster_state") {
		t.Fatalf("CLUSTER INFO: %v\n%s", err, text)
	}
}
