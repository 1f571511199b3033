package cluster_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	idnode "idserver/node"
)

// syncBuffer is a log the nodes write to concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cutOnRaft cuts its node off when the first Raft stream reaches it: a
// joiner that dies (to its peers) just as the leader starts to replicate to
// it, before it has caught up.
type cutOnRaft struct {
	*cutStream
	once sync.Once
	cut  chan struct{}
}

// peekedConn gives back the bytes Accept read to look at the stream.
type peekedConn struct {
	net.Conn
	peeked []byte
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.peeked) > 0 {
		n := copy(p, c.peeked)
		c.peeked = c.peeked[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (s *cutOnRaft) Accept() (net.Conn, error) {
	for {
		c, err := s.cutStream.Accept()
		if err != nil {
			return nil, err
		}
		// The handshake's hello opens with its version, then the kind.
		var b [2]byte
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b[:]); err != nil {
			c.Close()
			continue
		}
		c.SetReadDeadline(time.Time{})
		if b[1] == 'R' {
			s.once.Do(func() {
				s.partition(true)
				close(s.cut)
			})
		}
		if s.cutStream.cut.Load() {
			c.Close()
			continue
		}
		return &peekedConn{Conn: c, peeked: b[:]}, nil
	}
}

// TestJoinerCutOffMidJoinKeepsTheQuorum: with one of three voters down, a
// joiner that vanishes as soon as the leader starts replicating to it must
// not take the majority away. It enters as a non-voter, so the two live
// voters still commit; once it is back and caught up it is promoted, and
// then it counts: with it, two of the three voters left carry on.
func TestJoinerCutOffMidJoinKeepsTheQuorum(t *testing.T) {
	logs := &syncBuffer{}
	withLog := func(c *idnode.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) }
	n1, err := openNode(t, "n1", t.TempDir(), nil, withLog)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := openNode(t, "n2", t.TempDir(), n1, withLog)
	if err != nil {
		t.Fatal(err)
	}
	n3, err := openNode(t, "n3", t.TempDir(), n1, withLog)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*node{n1, n2, n3}
	ctx := context.Background()
	n3.stop() // two of three voters left: a majority, no more

	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	joinerStream := &cutOnRaft{cutStream: &cutStream{Listener: rl}, cut: make(chan struct{})}
	joined := make(chan error, 1)
	var n4 *node
	go func() {
		var err error
		n4, err = openNode(t, "n4", t.TempDir(), leader(t, nodes), func(c *idnode.Config) {
			withLog(c)
			c.RaftAddr, c.Network = rl.Addr().String(), joinerStream
		})
		joined <- err
	}()
	select {
	case <-joinerStream.cut:
	case err := <-joined:
		t.Fatalf("the joiner finished without the leader ever replicating to it: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the leader never opened a Raft stream to the joiner")
	}
	// The joiner is gone to its peers. The two live voters still commit
	// (a new tag forces an allocation through Raft), and the joiner became
	// a member all the same.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := n1.rdb.Do(ctx, "NEXTSEG", "after-cut", 10).Int64Slice()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit with a joiner cut off mid-join and one voter down: %v\n%s", err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info, _ := n1.rdb.Do(ctx, "CLUSTER", "INFO").Text()
		if strings.Contains(info, "n4=") && strings.Contains(info, "\r\nraft_suffrage:voter\r\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the joiner is not a member:\n%s", info)
		}
	}
	if err := follower(t, nodes, leader(t, nodes)).rdb.Do(ctx, "CLUSTER", "FORGET", "n3").Err(); err != nil {
		t.Fatalf("FORGET n3: %v", err)
	}

	// Back and caught up, the joiner is promoted by the leader.
	joinerStream.partition(false)
	if err := <-joined; err != nil {
		t.Fatalf("the joiner did not finish its start once back: %v", err)
	}
	nodes = append(nodes, n4)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info, _ := n4.rdb.Do(ctx, "CLUSTER", "INFO").Text()
		if strings.Contains(info, "\r\nraft_suffrage:voter\r\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n4 was never promoted:\n%s\n%s", info, logs)
		}
	}
	// Voters n1, n2, n4: stopping n2 leaves a majority with n4 in it.
	n2.stop()
	deadline = time.Now().Add(20 * time.Second)
	for {
		_, err := n1.rdb.Do(ctx, "NEXTSEG", "after-promotion", 10).Int64Slice()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit by n1 and the promoted n4: %v\n%s", err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := n4.rdb.Do(ctx, "INCR", "on-n4").Int64(); err != nil {
		t.Fatalf("INCR on the promoted joiner: %v", err)
	}
}
