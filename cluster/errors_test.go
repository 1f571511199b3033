package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"idserver/engine"
)

// TestNoLeaderCauses: each cause of ErrNoLeader is matched by errors.Is as
// itself and as ErrNoLeader, and as no other cause, with ErrNoLeader's
// text and its detail, here and once it crossed to another node.
func TestNoLeaderCauses(t *testing.T) {
	causes := []error{ErrLeaderUnknown, ErrNotLeader, ErrLeadershipUnconfirmed, ErrNotApplied, engine.ErrLeaseEnded, engine.ErrRefillLate}
	if len(causes) != len(noLeaderCauses) {
		t.Fatalf("%d causes tested, %d on the wire", len(causes), len(noLeaderCauses))
	}
	for _, cause := range causes {
		local := noLeader(cause, "node %s does not lead", "n1")
		var w wireError
		b, _ := json.Marshal(wireErrorOf(local))
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		for where, err := range map[string]error{"local": local, "remote": w.err()} {
			if want := engine.ErrNoLeader.Error() + ": node n1 does not lead"; err.Error() != want {
				t.Errorf("%s %v: text %q, want %q", where, cause, err, want)
			}
			if !errors.Is(err, ErrNoLeader) {
				t.Errorf("%s %v: not ErrNoLeader", where, cause)
			}
			for _, other := range causes {
				if got := errors.Is(err, other); got != (other == cause) {
					t.Errorf("%s %v: errors.Is(err, %v) = %v", where, cause, other, got)
				}
			}
			if nl := (*engine.NoLeaderError)(nil); !errors.As(err, &nl) || nl.Detail != "node n1 does not lead" {
				t.Errorf("%s %v: no NoLeaderError with the detail", where, cause)
			}
		}
	}
	// A node that sends no cause (one from before the field): still ErrNoLeader.
	if err := (wireError{Code: codeNoLeader, Msg: "no leader"}).err(); !errors.Is(err, ErrNoLeader) || err.Error() != "no leader" {
		t.Errorf("a no-leader answer without a cause: %v", err)
	}
}

// TestRefusedAsRemoved: a join's refusal for a removed node is ErrRefused
// and ErrRemoved, here and once it crossed to another node; any other
// refusal is not ErrRemoved, and neither is a refusal from a node that
// sends no cause (one from before the field).
func TestRefusedAsRemoved(t *testing.T) {
	cross := func(err error) error {
		var w wireError
		b, _ := json.Marshal(wireErrorOf(err))
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		return w.err()
	}
	removed := &removedJoin{fmt.Errorf("%w: join of node %q: %s; nothing changed", ErrRefused, "n3", removedRefusal)}
	other := fmt.Errorf("%w: join of node %q: another layout; nothing changed", ErrRefused, "n3")
	for _, tc := range []struct {
		name    string
		err     error
		removed bool
	}{
		{"local removed", removed, true},
		{"remote removed", cross(removed), true},
		{"remote removed, sent on again", cross(cross(removed)), true},
		{"local other", other, false},
		{"remote other", cross(other), false},
		{"remote removed without a cause", wireError{Code: codeRefused, Msg: removed.Error()}.err(), false},
	} {
		if !errors.Is(tc.err, ErrRefused) {
			t.Errorf("%s: not ErrRefused: %v", tc.name, tc.err)
		}
		if got := errors.Is(tc.err, ErrRemoved); got != tc.removed {
			t.Errorf("%s: errors.Is(err, ErrRemoved) = %v, want %v", tc.name, got, tc.removed)
		}
		if tc.err.Error() != removed.Error() && tc.err.Error() != other.Error() {
			t.Errorf("%s: text %q changed on the way", tc.name, tc.err)
		}
	}
}
