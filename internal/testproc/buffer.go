package testproc

import (
	"bytes"
	"os/exec"
	"sync"
	"testing"
)

// Buffer is a log written by one goroutine (a process's output, a node's
// logger) and read by the test while it is written.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// StartLogged starts cmd with its standard error (and its standard output,
// unless cmd has one) written to the Buffer it returns. The process is
// killed when the test ends, and its output logged, headed by what, if the
// test failed.
func StartLogged(t testing.TB, cmd *exec.Cmd, what string) *Buffer {
	t.Helper()
	out := &Buffer{}
	cmd.Stderr = out
	if cmd.Stdout == nil {
		cmd.Stdout = out
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", what, out)
		}
	})
	return out
}
