package engine

import (
	"strings"
	"testing"
	"time"
)

func TestParseWorkerRanges(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "  ", want: ""},
		{in: "0-15,100", want: "0-15,100"},
		{in: " 100 , 0 - 15 ", want: "0-15,100"},
		{in: "5,3,4,10-12,11-20,21", want: "3-5,10-21"},
		{in: "7-7", want: "7"},
		{in: "0-15,,100", err: "empty item"},
		{in: "0-15,", err: "empty item"},
		{in: "-1", err: "not a worker ID"},
		{in: "x", err: "not a worker ID"},
		{in: "9-3", err: "first <= last"},
		{in: "3-x", err: "first <= last"},
	} {
		rs, err := ParseWorkerRanges(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && FormatWorkerRanges(rs) != tc.want:
			t.Errorf("%q: %q, want %q", tc.in, FormatWorkerRanges(rs), tc.want)
		}
	}
}

// Reserved worker IDs are part of the layout's name (what the data
// directory stores and a join compares), and a layout without any keeps
// the name it had before they existed.
func TestLayoutReservedWorkers(t *testing.T) {
	l := DefaultLayout()
	plain := l.String()
	if plain != "epoch=2025-01-01T00:00:00Z time-bits=41 worker-bits=10 seq-bits=12 gene-bits=8" {
		t.Fatalf("layout without reserved workers: %q", plain)
	}
	l.Reserved = "0-15,100"
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := l.String(); got != plain+" reserved-workers=0-15,100" {
		t.Fatalf("layout with reserved workers: %q", got)
	}
	for w, want := range map[int64]bool{0: true, 15: true, 16: false, 99: false, 100: true, 101: false} {
		if l.IsReserved(w) != want {
			t.Errorf("IsReserved(%d) = %v", w, !want)
		}
	}
	for reserved, want := range map[string]string{
		"0-1024":   "does not fit in 10 worker bits",
		"0-1023":   "reserves all 1024 worker IDs",
		"100,0-15": "is not written as",
	} {
		l.Reserved = reserved
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("reserved %q: %v, want an error saying %q", reserved, err, want)
		}
	}
	l.Reserved = "0-1022"
	if err := l.Validate(); err != nil {
		t.Errorf("one worker left: %v", err)
	}
}

// CheckAbove accepts a layout whose first ID now is above the given one,
// and refuses one whose IDs are not, naming when they pass it and the
// latest epoch that sorts above it now; an epoch at that time passes.
func TestLayoutCheckAbove(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	l := DefaultLayout()
	first := l.FirstIDAt(now)
	if want := (now.UnixMilli() - DefaultEpoch.UnixMilli()) << 22; first != want {
		t.Fatalf("FirstIDAt: %d, want %d", first, want)
	}
	if err := l.CheckAbove(first-1, now); err != nil {
		t.Fatalf("just below the first ID: %v", err)
	}
	above := first + 3600_000<<22 // an hour of IDs ahead
	err := l.CheckAbove(above, now)
	if err == nil || !strings.Contains(err.Error(), "pass it only at 2026-12-03T09:00:00.001Z") ||
		!strings.Contains(err.Error(), "an --epoch at or before 2024-12-31T22:59:59.999Z") {
		t.Fatalf("an hour ahead: %v", err)
	}
	l.Epoch = time.Date(2024, 12, 31, 22, 59, 59, 999_000_000, time.UTC)
	if err := l.CheckAbove(above, now); err != nil {
		t.Fatalf("with the epoch the refusal named: %v", err)
	}
	l.Epoch = l.Epoch.Add(time.Millisecond)
	if err := l.CheckAbove(above, now); err == nil {
		t.Fatal("a millisecond after the epoch the refusal named: accepted")
	}
	l53, _ := AutoLayout(53, 10*time.Millisecond)
	if err := l53.CheckAbove(1<<53, now); err == nil || !strings.Contains(err.Error(), "no ID of this layout") {
		t.Fatalf("a 53-bit layout above 2^53: %v", err)
	}
	if err := l.CheckAbove(-1, now); err == nil {
		t.Fatal("a negative --above-id: accepted")
	}
}
