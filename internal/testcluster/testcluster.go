// Package testcluster runs idserver nodes in the test's process: the node
// the binary runs (node.Open), real Raft over loopback TCP on a port the
// test can cut, real Pebble in t.TempDir, a real RESP server and a go-redis
// client on it. Every node listens on 127.0.0.1, on ports from
// testproc.FreePort, and stops when the test ends.
//
// New opens a cluster; Cluster finds its leader (WaitLeader polls, never
// sleeps a fixed time), stops (Kill) and reopens (Restart) a member.
// Collector and Load drive every node with clients and check that no value
// is handed out twice.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/cluster"
	"idserver/engine"
	"idserver/internal/testproc"
	"idserver/internal/wait"
	"idserver/node"
)

// LeaderTimeout bounds every wait for a leader: a node's first election,
// and a new one after a member stops.
const LeaderTimeout = 20 * time.Second

// Node is one member, open until Stop or the end of the test.
type Node struct {
	ID      string
	Dir     string
	Node    *node.Node
	Cluster *cluster.Cluster
	Gen     *engine.Generator
	Addr    string        // RESP address
	Client  *redis.Client // on Addr, retrying nothing
	Worker  int64
	// Stream carries the node's Raft port (Raft and node-to-node
	// requests) and can cut it off; nil when Open's mod set
	// node.Config.Network.
	Stream *CutStream

	mod  func(*node.Config)
	down atomic.Bool
}

// Down reports whether Stop was called.
func (n *Node) Down() bool { return n.down.Load() }

// Stop shuts the node down (as a crash would, for its clients and peers).
// It may be called more than once.
func (n *Node) Stop() {
	if n.down.Swap(true) {
		return
	}
	n.Client.Close()
	n.Node.Close()
}

// Open starts a node in dir, on a Raft port the test can cut, with the
// test defaults (a 3 s window, 1 s of borrowing, segments of 100) then mod
// applied: the first node of a cluster (joinVia nil) bootstraps, or
// restarts on its directory; others join through joinVia's RESP address.
// It returns once the node knows a leader, or the error.
func Open(t testing.TB, id, dir string, joinVia *Node, mod func(*node.Config)) (*Node, error) {
	t.Helper()
	port := testproc.FreePort(t)
	rl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
	if err != nil {
		return nil, err
	}
	nd := &Node{ID: id, Dir: dir, Stream: &CutStream{Listener: rl}, mod: mod}
	cfg := node.Config{
		Bind: "127.0.0.1", Port: port, RaftAddr: rl.Addr().String(), Dir: dir, NodeID: id, Layout: engine.DefaultLayout(),
		Window: 3 * time.Second, MaxBorrow: time.Second, SegmentStep: 100, Version: "test",
		Network: nd.Stream,
	}
	if joinVia != nil {
		cfg.Join = joinVia.Addr
	}
	if mod != nil {
		mod(&cfg)
	}
	if cfg.Network != nd.Stream {
		rl.Close() // mod brought its own Raft port
		nd.Stream = nil
	}
	if nd.Node, err = node.Open(context.Background(), cfg); err != nil {
		rl.Close()
		return nil, err
	}
	nd.Cluster, nd.Gen, nd.Addr, nd.Worker = nd.Node.Cluster, nd.Node.Gen, nd.Node.Addr, nd.Node.Worker
	ctx, cancel := context.WithTimeout(context.Background(), LeaderTimeout)
	defer cancel()
	if _, err := nd.Cluster.WaitForLeader(ctx); err != nil {
		nd.Node.Close()
		return nil, fmt.Errorf("%s: no leader known after joining: %v", id, err)
	}
	nd.Client = redis.NewClient(&redis.Options{Addr: nd.Addr, MaxRetries: -1})
	t.Cleanup(nd.Stop)
	return nd, nil
}

// Start is Open failing the test on an error.
func Start(t testing.TB, id, dir string, joinVia *Node, mod func(*node.Config)) *Node {
	t.Helper()
	nd, err := Open(t, id, dir, joinVia, mod)
	if err != nil {
		t.Fatal(err)
	}
	return nd
}

// Cluster is a set of members: all of a cluster, or the part of it a test
// looks at.
type Cluster []*Node

// New opens n1..nsize, each in its own t.TempDir, the first bootstrapping
// and the others joining it, each configured by mod (nil for the
// defaults).
func New(t testing.TB, size int, mod func(*node.Config)) Cluster {
	t.Helper()
	var c Cluster
	for i := 1; i <= size; i++ {
		var via *Node
		if i > 1 {
			via = c[0]
		}
		c = append(c, Start(t, fmt.Sprintf("n%d", i), t.TempDir(), via, mod))
	}
	return c
}

// Leader is the live member that leads now, or nil.
func (c Cluster) Leader() *Node {
	for _, n := range c {
		if !n.Down() && n.Cluster.IsLeader() {
			return n
		}
	}
	return nil
}

// WaitLeader polls until a live member leads and returns it; it fails the
// test after LeaderTimeout.
func (c Cluster) WaitLeader(t testing.TB) *Node {
	t.Helper()
	var l *Node
	wait.For(t, LeaderTimeout, "a leader among the live members", func() (bool, string) {
		l = c.Leader()
		return l != nil, "none leads"
	})
	return l
}

// Follower is a live member other than l; it fails the test when there is
// none.
func (c Cluster) Follower(t testing.TB, l *Node) *Node {
	t.Helper()
	for _, n := range c {
		if n != l && !n.Down() {
			return n
		}
	}
	t.Fatal("no live follower")
	return nil
}

// Kill stops member i.
func (c Cluster) Kill(i int) { c[i].Stop() }

// Restart stops member i if it runs and opens it again on its directory,
// with its configuration, joining through the leader of the others; c[i]
// is the new node.
func (c Cluster) Restart(t testing.TB, i int) *Node {
	t.Helper()
	old := c[i]
	old.Stop()
	var others Cluster
	for j, n := range c {
		if j != i {
			others = append(others, n)
		}
	}
	c[i] = Start(t, old.ID, old.Dir, others.WaitLeader(t), old.mod)
	return c[i]
}

// CutStream is the Raft port over loopback TCP that a test can cut: while
// cut, the node neither reaches nor is reached by its peers.
type CutStream struct {
	net.Listener
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func (s *CutStream) track(c net.Conn) net.Conn {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	return c
}

// Accept is the listener's, closing what arrives while cut.
func (s *CutStream) Accept() (net.Conn, error) {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if s.cut.Load() {
			c.Close()
			continue
		}
		return s.track(c), nil
	}
}

// Dial reaches addr over TCP, or fails while cut.
func (s *CutStream) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	if s.cut.Load() {
		return nil, errors.New("partitioned")
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return s.track(c), nil
}

// IsCut reports whether the stream is cut.
func (s *CutStream) IsCut() bool { return s.cut.Load() }

// Partition cuts the node off (true), closing its connections, or heals
// it (false). Peers' dials to it fail too, since it accepts nothing while
// cut.
func (s *CutStream) Partition(cut bool) {
	s.cut.Store(cut)
	if cut {
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.conns = nil
		s.mu.Unlock()
	}
}

// WaitSpare waits until the node's buffer of tag holds a spare segment:
// the prefetch that its allocations started has landed.
func (n *Node) WaitSpare(t testing.TB, tag string) {
	t.Helper()
	wait.For(t, LeaderTimeout, n.ID+": a spare segment of "+tag, func() (bool, string) {
		for _, b := range n.Node.Segments.Status() {
			if b.Tag == tag {
				return b.SpareLeft > 0, fmt.Sprintf("%+v", b)
			}
		}
		return false, "no buffer"
	})
}

// RetryTryAgain runs do until it answers anything but TRYAGAIN, for at
// most LeaderTimeout, as a client does: TRYAGAIN (an election, a leader
// that stepped down) promises nothing was acknowledged, so a test whose
// claim is not about leadership asks again.
func RetryTryAgain(do func() error) error {
	deadline := time.Now().Add(LeaderTimeout)
	for {
		err := do()
		if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
