package cluster

// The Raft port's handshake: each side proves it knows the cluster secret
// before a byte of a Raft RPC or request is read (rpc.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"idserver/engine"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// waitLog polls until the log holds every one of want.
func waitLog(t *testing.T, log *testproc.Buffer, want ...string) {
	t.Helper()
	wait.For(t, 5*time.Second, "the log says every one of what it should", func() (bool, string) {
		text := log.String()
		for _, w := range want {
			if !strings.Contains(text, w) {
				return false, fmt.Sprintf("never %q in:\n%s", w, text)
			}
		}
		return true, ""
	})
}

// recordingNet is TCP whose dialed connections keep what they wrote.
type recordingNet struct {
	mu      sync.Mutex
	written bytes.Buffer
}

type recordingConn struct {
	net.Conn
	n *recordingNet
}

func (c recordingConn) Write(p []byte) (int, error) {
	c.n.mu.Lock()
	c.n.written.Write(p)
	c.n.mu.Unlock()
	return c.Conn.Write(p)
}

func (n *recordingNet) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (n *recordingNet) Close() error              { return nil }
func (n *recordingNet) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (n *recordingNet) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return recordingConn{c, n}, nil
}

// acceptorMux serves a mux on loopback keyed by secret, in cluster "c1";
// node-to-node streams it takes answer "ok" and close.
func acceptorMux(t *testing.T, secret string) (*mux, *testproc.Buffer, chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &testproc.Buffer{}
	refusedCluster := make(chan string, 10)
	m := &mux{net: tcpNetwork{Listener: ln}, addr: ln.Addr(), secret: []byte(secret),
		log: slog.New(slog.NewTextHandler(log, nil)), clusterID: func() string { return "c1" },
		serveRPC:  func(c net.Conn) { c.Write([]byte("ok")) },
		refused:   func(from, theirs string) { refusedCluster <- theirs },
		raftConns: make(chan net.Conn, 10), closed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go m.run()
	t.Cleanup(func() { m.Close() })
	return m, log, refusedCluster
}

func dialerMux(network Network, secret, cluster string) *mux {
	return &mux{net: network, secret: []byte(secret), clusterID: func() string { return cluster }}
}

// TestHandshake: a dialer with the secret reaches both kinds of stream; a
// wrong secret, a replayed proof, today's header without the handshake, a
// listener that cannot prove back, and a silent dialer are each refused,
// and the acceptor logs who and why.
func TestHandshake(t *testing.T) {
	testproc.Long(t)
	m, log, refusedCluster := acceptorMux(t, "pw")
	addr := m.addr.String()

	// The secret: a node-to-node stream is served, a Raft stream queued.
	conn, err := dialerMux(tcpNetwork{}, "pw", "c1").dial(addr, streamRPC, 2*time.Second)
	if err != nil {
		t.Fatalf("dial with the secret: %v", err)
	}
	if b, _ := io.ReadAll(conn); string(b) != "ok" {
		t.Fatalf("the node-to-node stream was not served: %q", b)
	}
	conn.Close()
	if conn, err = dialerMux(tcpNetwork{}, "pw", "c1").dial(addr, streamRaft, 2*time.Second); err != nil {
		t.Fatalf("Raft stream with the secret: %v", err)
	}
	conn.Close()
	select {
	case c := <-m.raftConns:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the proved Raft stream never reached Raft")
	}
	// The secret but another cluster: a Raft stream is refused after the
	// handshake, as before it existed.
	if conn, err = dialerMux(tcpNetwork{}, "pw", "c2").dial(addr, streamRaft, 2*time.Second); err != nil {
		t.Fatalf("handshake from cluster c2: %v", err)
	}
	conn.Close()
	if theirs := <-refusedCluster; theirs != "c2" {
		t.Fatalf("refused a Raft stream of cluster %q, want c2", theirs)
	}

	// A wrong secret, and none: the dialer is told, nothing is served.
	for _, guess := range []string{"guess", ""} {
		conn, err := dialerMux(tcpNetwork{}, guess, "c1").dial(addr, streamRPC, 2*time.Second)
		if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "refused this node's proof") {
			t.Fatalf("dial with secret %q: %v, want ErrAuth, its proof refused", guess, err)
		}
		if conn != nil {
			t.Fatal("a refused dial returned a connection")
		}
	}
	waitLog(t, log, "refused a connection to the Raft port", "reason=\"wrong proof: the dialer does not know the cluster secret\"", "from=127.0.0.1:")

	// A replayed handshake: what a dialer with the secret sent, sent again,
	// is refused (the acceptor's nonce is new).
	rec := &recordingNet{}
	conn, err = dialerMux(rec, "pw", "c1").dial(addr, streamRPC, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	replay, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	replay.Write(rec.written.Bytes())
	replay.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(replay)
	replay.Close()
	if len(got) != nonceSize+len(proofRefused) || !bytes.Equal(got[nonceSize:], proofRefused[:]) {
		t.Fatalf("a replayed handshake got %d bytes back (want only the acceptor's %d-byte nonce, then its refusal): %q", len(got), nonceSize, got)
	}

	// Today's header (kind, cluster ID) without the handshake: refused at
	// its first byte, before the cluster ID is read.
	old, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	old.Write(append([]byte{streamRaft, 2}, "c1"...))
	old.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(old); len(b) != 0 {
		t.Fatalf("today's header got an answer: %q", b)
	}
	old.Close()
	waitLog(t, log, `reason="opened with 'R', not the handshake`)
	select {
	case c := <-m.raftConns:
		t.Fatalf("a stream that did not prove the secret reached Raft (from %s)", c.RemoteAddr())
	default:
	}

	// A listener that plays the handshake without the secret: the dialer
	// refuses its proof, and sends nothing more.
	fake, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	afterProof := make(chan int, 1)
	go func() {
		c, err := fake.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		hello := make([]byte, 3+2+1+nonceSize) // kind, lengths, "c1", an empty target, the nonce
		io.ReadFull(c, hello)
		c.Write(make([]byte, nonceSize))
		io.ReadFull(c, make([]byte, 32))
		c.Write(bytes.Repeat([]byte{7}, 32))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		rest, _ := io.ReadAll(c)
		afterProof <- len(rest)
	}()
	if _, err := dialerMux(tcpNetwork{}, "pw", "c1").dial(fake.Addr().String(), streamRaft, 2*time.Second); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "proof is wrong") {
		t.Fatalf("dial to a listener without the secret: %v, want its proof refused", err)
	}
	if n := <-afterProof; n != 0 {
		t.Fatalf("the dialer sent %d bytes to a listener whose proof was wrong", n)
	}

	// A dialer that sends nothing is closed when the handshake's time is up.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	silent.SetReadDeadline(time.Now().Add(3 * handshakeTimeout))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF || time.Since(start) > 2*handshakeTimeout {
		t.Fatalf("a silent dialer: %v after %v, want EOF after about %v", err, time.Since(start), handshakeTimeout)
	}
	waitLog(t, log, `reason="no hello: read tcp`)
}

// TestForgedRaftRPCsNeedTheSecret: a real one-node cluster keyed by a
// secret. Raft's own transport, over a mux that names the cluster's ID but
// holds a wrong secret, cannot deliver AppendEntries with a huge term or
// InstallSnapshot with an empty state: the term and the tags are as they
// were. The same forgery with the secret is taken (the term jumps): the
// secret, not the cluster ID, is what keeps it out.
func TestForgedRaftRPCsNeedTheSecret(t *testing.T) {
	log := &testproc.Buffer{}
	c := soloLeader(t, log)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.allocLocal(ctx, []allocItem{{Tag: "orders", N: 10, Node: "n1"}}); err != nil {
		t.Fatal(err)
	}
	term := c.raft.Stats()["term"]

	forge := func(secret string) (*raft.AppendEntriesResponse, error, error) {
		attacker := dialerMux(&recordingNet{}, secret, c.ClusterID())
		attacker.closed = make(chan struct{})
		attacker.addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
		trans := raft.NewNetworkTransport(raftStream{attacker}, 1, 2*time.Second, io.Discard)
		defer trans.Close()
		target := raft.ServerAddress(c.RaftAddr())
		var ae raft.AppendEntriesResponse
		aeErr := trans.AppendEntries("n1", target, &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
			Term:      5000, Leader: []byte("127.0.0.1:1"), LeaderCommitIndex: 1 << 20,
		}, &ae)
		var is raft.InstallSnapshotResponse
		state := []byte("{}")
		isErr := trans.InstallSnapshot("n1", target, &raft.InstallSnapshotRequest{
			RPCHeader:       raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
			SnapshotVersion: 1, Term: 5001, Leader: []byte("127.0.0.1:1"), LastLogIndex: 1 << 20, LastLogTerm: 5001,
			Configuration: raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: target}}}), ConfigurationIndex: 1 << 20,
			Size: int64(len(state)),
		}, &is, bytes.NewReader(state))
		return &ae, aeErr, isErr
	}

	_, aeErr, isErr := forge("guess")
	if aeErr == nil || isErr == nil {
		t.Fatalf("forged RPCs with a wrong secret were delivered: AppendEntries %v, InstallSnapshot %v", aeErr, isErr)
	}
	if !errors.Is(aeErr, ErrAuth) {
		t.Fatalf("forged AppendEntries: %v, want ErrAuth", aeErr)
	}
	if now := c.raft.Stats()["term"]; now != term {
		t.Fatalf("term %s after forged RPCs, was %s", now, term)
	}
	if v, ok := c.fsm.tag("orders"); !ok || v != 10 || c.fsm.size() != 1 {
		t.Fatalf("state after forged RPCs: orders %d %v, %d tags", v, ok, c.fsm.size())
	}
	waitLog(t, log, "refused a connection to the Raft port", "wrong proof")

	// The control: the same forgery with the secret is taken.
	ae, aeErr, _ := forge("pw")
	if aeErr != nil || ae.Term != 5000 {
		t.Fatalf("the forgery with the secret: %v, term %d: the test's forger does not work", aeErr, ae.Term)
	}
	if now, _ := strconv.Atoi(c.raft.Stats()["term"]); now < 5000 {
		t.Fatalf("term %d after AppendEntries with the secret at term 5000", now)
	}
}

// TestRefusalLogIsBounded: of 250 refused connections in a burst, the
// first ten are logged, then the 100th and the 200th, each with the count;
// a minute after the last line, the next one is logged again.
func TestRefusalLogIsBounded(t *testing.T) {
	log := &testproc.Buffer{}
	m := &mux{log: slog.New(slog.NewTextHandler(log, nil)), closed: make(chan struct{})}
	for i := 0; i < 250; i++ {
		m.logRefusal(unprovedMsg, "127.0.0.1:9", errors.New("wrong proof"))
	}
	m.lastLog.Add(-int64(time.Minute))
	m.logRefusal(unprovedMsg, "127.0.0.1:9", errors.New("wrong proof"))
	m.logRefusal(unprovedMsg, "127.0.0.1:9", errors.New("wrong proof"))
	var counts []string
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		counts = append(counts, line[strings.LastIndex(line, "=")+1:])
	}
	if got := strings.Join(counts, ","); got != "1,2,3,4,5,6,7,8,9,10,100,200,251" {
		t.Fatalf("logged refusals %s, want the first ten, the 100th, the 200th and the 251st (a minute later)", got)
	}
}

// TestHandshakesUnderWayAreBounded: with maxHandshakes connections silent
// in their handshake, one more takes the place of the one that waited
// longest, which is closed with the reason logged: never more than
// maxHandshakes are under way, and a node with the secret gets in at once.
func TestHandshakesUnderWayAreBounded(t *testing.T) {
	m, log, _ := acceptorMux(t, "pw")
	addr := m.addr.String()
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range maxHandshakes {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
		// In order: the first one dialed is the first one under way.
		wait.For(t, 5*time.Second, fmt.Sprintf("%d handshakes under way", len(silent)), func() (bool, string) {
			n := m.underWay()
			return n >= len(silent), fmt.Sprint(n)
		})
	}
	conn, err := dialerMux(tcpNetwork{}, "pw", "c1").dial(addr, streamRPC, 2*time.Second)
	if err != nil {
		t.Fatalf("a node with the secret, with %d silent handshakes under way: %v, want in", maxHandshakes, err)
	}
	conn.Close()
	silent[0].SetReadDeadline(time.Now().Add(handshakeTimeout / 2))
	if _, err := silent[0].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the silent handshake that waited longest: %v, want closed to make room", err)
	}
	waitLog(t, log, `reason="closed to make room: 64 handshakes under way, this one the longest"`)
	if n := m.underWay(); n > maxHandshakes {
		t.Fatalf("%d handshakes under way, want at most %d", n, maxHandshakes)
	}
}

// TestSilentFloodDoesNotLockNodesOut: a process without the secret that
// keeps twice maxHandshakes connections silent on the Raft port, opening
// one again 10 ms after one is closed (a flood that, holding a follower's
// port through a leader's death, would leave the cluster without a leader),
// does not keep a node with the secret out: each of 20 nodes gets in within
// 2 s, retrying as Raft's transport does.
func TestSilentFloodDoesNotLockNodesOut(t *testing.T) {
	m, _, _ := acceptorMux(t, "pw")
	addr := m.addr.String()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 * maxHandshakes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err == nil {
					c.Write([]byte{helloV1, streamRaft})
					go func() { <-stop; c.Close() }()
					c.Read(make([]byte, 1)) // until the acceptor closes it
					c.Close()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	wait.For(t, 5*time.Second, fmt.Sprintf("the flood fills %d handshakes", maxHandshakes), func() (bool, string) {
		n := m.underWay()
		return n >= maxHandshakes, fmt.Sprintf("%d under way", n)
	})
	for i := range 20 {
		wait.For(t, 2*time.Second, fmt.Sprintf("node %d of 20 with the secret gets in under a flood of silent handshakes", i+1), func() (bool, string) {
			conn, err := dialerMux(tcpNetwork{}, "pw", "c1").dial(addr, streamRPC, time.Second)
			if err != nil {
				return false, err.Error()
			}
			conn.Close()
			return true, ""
		})
	}
}

// TestRaftStreamForAnotherNodeIsRefused: a Raft stream whose dialer reaches
// for a member at this address (the state machine's member there) is
// taken only by that member: a new node at a dead member's address, with
// an empty disk, never stands in for it in Raft.
func TestRaftStreamForAnotherNodeIsRefused(t *testing.T) {
	testproc.Long(t)
	m, log, _ := acceptorMux(t, "pw")
	m.nodeID = "n-new"
	addr := m.addr.String()
	dialFor := func(target string) {
		t.Helper()
		d := dialerMux(tcpNetwork{}, "pw", "c1")
		d.nodeAt = func(a string) string {
			if a != addr {
				t.Errorf("looked up %s, dialled %s", a, addr)
			}
			return target
		}
		conn, err := d.dial(addr, streamRaft, 2*time.Second)
		if err != nil {
			t.Fatalf("dial for %q: %v", target, err)
		}
		conn.Close()
	}
	taken := func() bool {
		select {
		case c := <-m.raftConns:
			c.Close()
			return true
		case <-time.After(time.Second):
			return false
		}
	}
	dialFor("n-old")
	waitLog(t, log, "refused a Raft stream for another node", "a Raft stream for node n-old reached node n-new")
	if taken() {
		t.Fatal("a Raft stream for n-old reached n-new's Raft")
	}
	for _, target := range []string{"n-new", ""} { // its own ID, or a dialer that does not know who is there
		dialFor(target)
		if !taken() {
			t.Fatalf("a Raft stream for %q was not taken", target)
		}
	}
}

// TestRaftStreamsNameRaftsMember: the member a Raft stream names is the one
// Raft's configuration has at the address, not the state machine's, which
// may lag the log. After a power cut of every node, unsynced applies lost,
// the state machine named a replaced member's old ID at its successor's
// address; every vote request was refused and no leader was elected again.
func TestRaftStreamsNameRaftsMember(t *testing.T) {
	c := soloLeader(t, io.Discard)
	addr := c.RaftAddr()
	if got := c.memberAt(addr); got != "n1" {
		t.Fatalf("member at %s: %q, want n1", addr, got)
	}
	// The state machine as a lost apply leaves it: the replaced member at
	// this address.
	stale := map[string]member{"n0-old": {RaftAddr: addr}}
	c.fsm.members.Store(&stale)
	if got := c.memberAt(addr); got != "n1" {
		t.Fatalf("with the state machine naming n0-old at %s, a stream there names %q; want n1, Raft's member", addr, got)
	}
}

// soloLeader opens a one-node cluster "n1" with the secret "pw", logging to
// log, and waits until it leads; it is closed when the test ends.
func soloLeader(t *testing.T, log io.Writer) *Cluster {
	t.Helper()
	c, err := Open(Config{NodeID: "n1", Dir: t.TempDir(), RaftBind: "127.0.0.1:0", Secret: "pw",
		Layout: engine.DefaultLayout(), Store: openStore(t), Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// stallingNet is TCP whose dialed connections run hook before their
// second write (the dialer's proof).
type stallingNet struct{ hook func() }

type stallingConn struct {
	net.Conn
	writes int
	hook   func()
}

func (n stallingNet) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &stallingConn{Conn: c, hook: n.hook}, nil
}

func (n stallingNet) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (n stallingNet) Close() error              { return nil }
func (n stallingNet) Addr() net.Addr            { return nil }

func (c *stallingConn) Write(b []byte) (int, error) {
	if c.writes++; c.writes == 2 {
		c.hook()
	}
	return c.Conn.Write(b)
}

// TestHandshakeClosedToMakeRoomIsNotAWrongSecret: a dialer with the secret
// whose handshake the acceptor closes to make room for maxHandshakes newer
// ones is told the node is busy with handshakes, not that its secret is
// wrong (no ErrAuth); the acceptor logs it as a handshake closed to make
// room, not as a refused proof.
func TestHandshakeClosedToMakeRoomIsNotAWrongSecret(t *testing.T) {
	m, log, _ := acceptorMux(t, "pw")
	addr := m.addr.String()
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	crowd := func() { // maxHandshakes newer handshakes: the dialer's is the longest under way
		for range maxHandshakes {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			silent = append(silent, c)
		}
		wait.For(t, 5*time.Second, "the dialer's handshake closed to make room", func() (bool, string) {
			return m.unproved.Load() > 0, log.String()
		})
	}
	_, err := dialerMux(stallingNet{hook: crowd}, "pw", "c1").dial(addr, streamRPC, 5*time.Second)
	if err == nil || errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "busy with handshakes") {
		t.Fatalf("a handshake closed to make room: %v, want the node busy with handshakes, not ErrAuth", err)
	}
	if strings.Contains(log.String(), unprovedMsg) {
		t.Fatalf("the acceptor logged a handshake it closed to make room as a refused proof:\n%s", log)
	}
}
