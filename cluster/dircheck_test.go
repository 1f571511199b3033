package cluster

import (
	"errors"
	"testing"
)

// TestApplyAnswerIsChecked: an Apply answer of the wrong type (nil, from a
// state machine ahead of its log) is an error, not a panic.
func TestApplyAnswerIsChecked(t *testing.T) {
	if _, err := applyAnswer[leaseResult](nil, "lease"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("nil answer: %v", err)
	}
	if lr, err := applyAnswer[leaseResult](leaseResult{EndMS: 7}, "lease"); err != nil || lr.EndMS != 7 {
		t.Fatalf("a lease answer: %v %v", lr, err)
	}
}
