// Package wait lets a test wait for a condition instead of a fixed time:
// For polls until the condition holds and fails the test, naming what it
// waited for and the condition's last word, when a deadline passes first;
// Holds checks that a condition stays true for a span of time.
//
// A condition is a func() (bool, string): whether it holds, and what was
// seen, for the failure message.
package wait

import (
	"testing"
	"time"
)

// Poll is the longest interval between two calls of a condition. The
// first calls come sooner (1 ms, then twice as long each time up to Poll),
// so that a condition about to hold is seen at once.
const Poll = 20 * time.Millisecond

// For calls cond until it returns true, and fails the test with
// what, the timeout and cond's last message if timeout passes first. cond
// is called at least once, and once more after the deadline, so that a
// slow call does not lose a condition that came true during it.
func For(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if last, ok := Until(timeout, cond); !ok {
		t.Fatalf("%s: not within %v; last seen: %s", what, timeout, last)
	}
}

// Until calls cond until it returns true or timeout passes, and
// reports whether it held and cond's last message. It is For for a caller
// that decides itself what a timeout means.
func Until(timeout time.Duration, cond func() (bool, string)) (string, bool) {
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; ; pause = min(2*pause, Poll) {
		after := time.Now().After(deadline)
		ok, last := cond()
		if ok {
			return last, true
		}
		if after {
			return last, false
		}
		time.Sleep(pause)
	}
}

// Holds calls cond every Poll for the span d and fails the test, with what
// and cond's message, the first time it returns false. It is the check for
// something that must not happen, where no event marks that it never will.
func Holds(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(Poll) {
		ok, last := cond()
		if !ok {
			t.Fatalf("%s: stopped holding within %v; seen: %s", what, d, last)
		}
		if time.Now().After(end) {
			return
		}
	}
}
