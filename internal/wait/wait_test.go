package wait

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and stops the
// calling goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func run(r *recorder, f func()) {
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	f()
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	r := &recorder{TB: t}
	run(r, func() {
		For(r, 5*time.Second, "the third call", func() (bool, string) { calls++; return calls == 3, "" })
	})
	if r.msg != "" || calls != 3 {
		t.Fatalf("calls %d, failure %q; want 3 calls and no failure", calls, r.msg)
	}
}

func TestForFailsWithWhatAndTheLastWord(t *testing.T) {
	calls := 0
	r := &recorder{TB: t}
	run(r, func() {
		For(r, 100*time.Millisecond, "never", func() (bool, string) { calls++; return false, fmt.Sprintf("call %d", calls) })
	})
	if !strings.Contains(r.msg, "never: not within 100ms") || !strings.Contains(r.msg, fmt.Sprintf("call %d", calls)) {
		t.Fatalf("failure %q after %d calls", r.msg, calls)
	}
}

func TestForCallsOnceMoreAfterTheDeadline(t *testing.T) {
	calls := 0
	r := &recorder{TB: t}
	run(r, func() {
		// The first call outlasts the timeout; the second sees the condition true.
		For(r, time.Millisecond, "slow", func() (bool, string) {
			calls++
			time.Sleep(5 * time.Millisecond)
			return calls == 2, ""
		})
	})
	if r.msg != "" || calls != 2 {
		t.Fatalf("calls %d, failure %q", calls, r.msg)
	}
}

func TestHoldsFailsAtTheFirstFalse(t *testing.T) {
	calls := 0
	r := &recorder{TB: t}
	began := time.Now()
	run(r, func() {
		Holds(r, 10*time.Second, "fewer than 3 calls", func() (bool, string) { calls++; return calls < 3, "three" })
	})
	if !strings.Contains(r.msg, "fewer than 3 calls") || calls != 3 || time.Since(began) > 5*time.Second {
		t.Fatalf("calls %d after %v, failure %q", calls, time.Since(began), r.msg)
	}
	r = &recorder{TB: t}
	run(r, func() { Holds(r, 50*time.Millisecond, "always", func() (bool, string) { return true, "" }) })
	if r.msg != "" {
		t.Fatalf("a condition that held failed: %q", r.msg)
	}
}
