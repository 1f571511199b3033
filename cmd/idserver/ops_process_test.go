package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/testproc"
)

// lockedBuffer is a process's standard error, read while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startUnready starts idserver with args on a port of its own without
// waiting for it (a node that cannot join logs no "listening" line), and
// returns its address and standard error. It is killed when the test ends.
func startUnready(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	port := strconv.Itoa(testproc.FreePort(t))
	cmd := exec.Command(binary, append([]string{"--port", port, "--dir", t.TempDir()}, args...)...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("log of %v:\n%s", args, stderr)
		}
	})
	return "127.0.0.1:" + port, stderr
}

// TestPingAnswersLoadingUntilReady: a readiness probe's PING says ready
// only when the node issues, as Redis 7 answers -LOADING to PING while it
// loads. A joiner whose --join cannot be reached answers INFO (loading:1)
// and -LOADING to PING; a fresh node whose PING answered PONG issues at
// once.
func TestPingAnswersLoadingUntilReady(t *testing.T) {
	nowhere := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	addr, _ := startUnready(t, "--join", nowhere)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	var info string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if info, err = rdb.Info(ctx, "persistence").Result(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("INFO on a joiner that cannot join: %v", err)
		}
	}
	if !strings.Contains(info, "loading:1") {
		t.Fatalf("INFO persistence on a joiner that cannot join: %q", info)
	}
	if err := rdb.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
		t.Fatalf("PING on a joiner that cannot join: %v, want -LOADING", err)
	}

	// testproc waits for PING to succeed: then NEXTID and INCR answer.
	p := startProc(t, t.TempDir())
	c := p.client()
	if err := c.Do(ctx, "NEXTID").Err(); err != nil {
		t.Fatalf("NEXTID right after PONG: %v", err)
	}
	if err := c.Do(ctx, "INCR", "t").Err(); err != nil {
		t.Fatalf("INCR right after PONG: %v", err)
	}
}
