package cluster_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"idserver/cluster"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	idnode "idserver/node"
)

// errorCounter counts a logger's ERROR records by message, and the repeats
// they say were folded.
type errorCounter struct {
	mu     sync.Mutex
	byMsg  map[string]int
	folded int64
}

func (c *errorCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *errorCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *errorCounter) WithGroup(string) slog.Handler            { return c }

func (c *errorCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byMsg[r.Message]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "folded" {
			c.folded += a.Value.Int64()
		}
		return true
	})
	return nil
}

// counts is how many ERROR lines, of how many messages, and the folded
// repeats they reported.
func (c *errorCounter) counts() (lines, messages int, folded int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.byMsg {
		lines += n
	}
	return lines, len(c.byMsg), c.folded
}

// TestDeadMemberDoesNotFloodTheLeadersLog: with one member of three down
// (and kept: no --dead-member-after), the leader's Raft errors about it
// (heartbeats, replication) are logged once per fold interval each, the
// later lines counting the repeats folded.
func TestDeadMemberDoesNotFloodTheLeadersLog(t *testing.T) {
	testproc.Long(t)
	const fold, window = 2 * time.Second, 10 * time.Second
	t.Cleanup(cluster.SetRaftLogFold(fold))
	var mu sync.Mutex
	counters := map[string]*errorCounter{}
	nodes := testcluster.New(t, 3, func(c *idnode.Config) {
		ec := &errorCounter{byMsg: map[string]int{}}
		mu.Lock()
		counters[c.NodeID] = ec
		mu.Unlock()
		c.Logger = slog.New(ec)
	})
	l := nodes.WaitLeader(t)
	victim := nodes.Follower(t, l)
	victim.Stop()
	ec := counters[l.ID]
	lines0, _, _ := ec.counts()
	start := time.Now()
	for time.Since(start) < window {
		time.Sleep(100 * time.Millisecond) // the measurement window
	}
	lines, messages, folded := ec.counts()
	lines -= lines0
	ec.mu.Lock()
	t.Logf("%d ERROR lines of %d messages in %v with %s down, %d repeats folded: %v", lines, messages, window, victim.ID, folded, ec.byMsg)
	ec.mu.Unlock()
	if bound := messages*int(window/fold+1) + 3; lines > bound {
		t.Errorf("%d ERROR lines in %v from %d messages, want at most %d (each once per %v)", lines, window, messages, bound, fold)
	}
	if folded == 0 {
		t.Errorf("no line counts the repeats it folded")
	}
}
