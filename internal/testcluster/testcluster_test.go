package testcluster

import (
	"context"
	"testing"
)

// TestKillAndRestart: a three-node cluster elects a new leader when its
// leader stops, and the stopped member, opened again on its directory,
// serves an allocation through Raft.
func TestKillAndRestart(t *testing.T) {
	c := New(t, 3, nil)
	ctx := context.Background()
	l := c.WaitLeader(t)
	i := 0
	for c[i] != l {
		i++
	}
	c.Kill(i)
	if nl := c.WaitLeader(t); nl == l || nl.Down() {
		t.Fatalf("leader after killing %s: %s", l.ID, nl.ID)
	}
	n := c.Restart(t, i)
	if n.ID != l.ID || n.Dir != l.Dir || n == l {
		t.Fatalf("restarted member: %s in %s, want %s in %s", n.ID, n.Dir, l.ID, l.Dir)
	}
	if err := n.Client.Do(ctx, "SET", "restarted", 7).Err(); err != nil {
		t.Fatalf("SET through the restarted member: %v", err)
	}
	if v, err := n.Client.Do(ctx, "INCR", "restarted").Int64(); err != nil || v != 8 {
		t.Fatalf("INCR on the restarted member: %d %v, want 8", v, err)
	}
}
