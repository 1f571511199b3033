package cluster_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"idserver/cluster"
	"idserver/internal/testcluster"
	"idserver/internal/testproc"
	idnode "idserver/node"
)

// TestLeaderOnAFullDiskAnswersWithinTheApplyBudget: a one-node cluster
// on a 16 MiB tmpfs, filled until less than the store's reserve is free
// but Raft's log still has room. The state machine then waits for space,
// and Raft answers an entry's future only once it is applied: a lease
// renewal and a SET, which wait on that future, must fail within the
// apply budget with ErrNoLeader naming the full disk, not wait until
// space is freed (a SET left unanswered, and the node's lease renewal loop
// stuck, so that NEXTID would say "the clock moved past the worker lease
// (stepped forward?)"). Once space is freed both work again.
func TestLeaderOnAFullDiskAnswersWithinTheApplyBudget(t *testing.T) {
	testproc.Long(t)
	mnt := testproc.Tmpfs(t, "16m")
	steps := &countingHandler{Handler: slog.NewTextHandler(io.Discard, nil), prefix: "high-water step failed"}
	nd, err := testcluster.Open(t, "n1", filepath.Join(mnt, "n1"), nil, func(c *idnode.Config) { c.Logger = slog.New(steps) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := nd.Cluster.Set(ctx, "t", 10, ""); err != nil {
		t.Fatal(err)
	}
	// Leave 512 KiB free: below the reserve (1.6 MiB), room for Raft.
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-512<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	budget := nd.Cluster.Timing().Apply
	type answer struct {
		what string
		err  error
		took time.Duration
	}
	answers := make(chan answer, 2)
	start := time.Now()
	go func() {
		_, err := nd.Cluster.RenewLease(ctx, nd.Worker, nd.Cluster.Lease()+1000)
		answers <- answer{"RenewLease", err, time.Since(start)}
	}()
	go func() {
		_, _, err := nd.Cluster.Set(ctx, "t", 20, "")
		answers <- answer{"SET", err, time.Since(start)}
	}()
	for range 2 {
		select {
		case a := <-answers:
			t.Logf("%s on the full disk: %v after %v", a.what, a.err, a.took.Round(time.Millisecond))
			if !errors.Is(a.err, cluster.ErrNoLeader) || !strings.Contains(a.err.Error(), "disk full") {
				t.Errorf("%s on the full disk: %v, want ErrNoLeader naming the full disk", a.what, a.err)
			}
		case <-time.After(budget + 10*time.Second):
			t.Fatalf("no answer %v after the disk filled (apply budget %v)", time.Since(start).Round(time.Millisecond), budget)
		}
	}
	// The generator's high-water step fails eight times a window while the
	// disk is full: logged once a second.
	if n, full := steps.n.Load(), time.Since(start); n > int64(full/time.Second)+2 {
		t.Errorf("%d 'high-water step failed' lines in the %v the disk was full, want one a second", n, full.Round(time.Millisecond))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := nd.Cluster.RenewLease(ctx, nd.Worker, nd.Cluster.Lease()+1000); err != nil {
		t.Errorf("RenewLease once space is freed: %v", err)
	}
	if _, _, err := nd.Cluster.Set(ctx, "t", 30, ""); err != nil {
		t.Errorf("SET once space is freed: %v", err)
	}
}

// countingHandler counts the records whose message starts with prefix.
type countingHandler struct {
	slog.Handler
	prefix string
	n      atomic.Int64
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}
