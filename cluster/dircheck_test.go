package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
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

// TestCommandApplyPanicsOnIsRefused: a command entry that Apply would
// panic on (a damaged log: bits flipped in its length or its type byte)
// fails the start-up check, which refuses the start, rather than passing it
// and crashing the node once the entry is applied.
func TestCommandApplyPanicsOnIsRefused(t *testing.T) {
	logs := raft.NewInmemStore()
	entries := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: newEntry(entryInit).string("c").string("l")},
		{Index: 2, Type: raft.LogCommand},
		{Index: 3, Type: raft.LogCommand, Data: []byte{0xee, 1, 2}},
		{Index: 4, Type: raft.LogNoop},
	}
	if err := logs.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "empty command", "unknown type 238", ""} {
		err := checkLogEntry(logs, uint64(i+1))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("entry %d: %v, want %q", i+1, err, want)
		}
	}
}
