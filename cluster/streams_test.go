package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestStreamsAreBoundedAndWaitedFor: 3*maxStreams requests at once to a
// node that holds its answers open up to maxStreams streams and
// handshakes, never more; the others wait for one to come back, and every
// request is answered once the node answers. A request that finds every
// stream busy past its deadline gives up at its deadline, having dialed
// nothing.
func TestStreamsAreBoundedAndWaitedFor(t *testing.T) {
	m, _, _ := acceptorMux(t, "pw")
	gate := make(chan struct{})
	var served, busy atomic.Int64
	m.serveRPC = func(conn net.Conn) {
		served.Add(1)
		for {
			var req request
			if err := readFrame(conn, &req); err != nil {
				return
			}
			busy.Add(1)
			<-gate
			busy.Add(-1)
			if err := writeFrame(conn, &response{Seq: req.Seq, Op: req.Op}); err != nil {
				return
			}
		}
	}
	c := &Cluster{mux: dialerMux(tcpNetwork{}, "pw", "c1"), pool: map[string]*streams{}, timing: TimingFor(1),
		log: slog.New(slog.NewTextHandler(&testproc.Buffer{}, nil))}
	id := "c1"
	c.cluster.Store(&id)
	addr := m.addr.String()

	const requests = 3 * maxStreams
	errs := make(chan error, requests)
	var wg sync.WaitGroup
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := c.call(ctx, addr, &request{Op: opHigh})
			errs <- err
		}()
	}
	wait.For(t, 10*time.Second, "every stream busy", func() (bool, string) {
		return busy.Load() == maxStreams, fmt.Sprint(busy.Load())
	})

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.call(ctx, addr, &request{Op: opHigh})
	if err == nil || !strings.Contains(err.Error(), "waiting for one of its") || time.Since(start) > 5*time.Second {
		t.Fatalf("a request with every stream busy: %v after %v, want it to give up waiting at its deadline", err, time.Since(start))
	}
	if n := served.Load(); n != maxStreams {
		t.Fatalf("%d streams opened for %d requests at once, want %d", n, requests+1, maxStreams)
	}

	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a request that waited for a stream: %v", err)
		}
	}
	if n := served.Load(); n != maxStreams {
		t.Fatalf("%d streams opened for %d requests, want %d", n, requests+1, maxStreams)
	}
}
