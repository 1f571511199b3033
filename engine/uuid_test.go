package engine

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
	"time"
)

// TestUUIDv7StrictlyIncreases: within a millisecond, across milliseconds,
// and when the clock steps back, every UUID is above the one before, as
// bytes and as text, and carries version 7, variant 10 and its time.
func TestUUIDv7StrictlyIncreases(t *testing.T) {
	clock := time.UnixMilli(1_800_000_000_000)
	g := NewUUIDv7(func() time.Time { return clock }, rand.Reader)
	var all [][16]byte
	steps := []time.Duration{0, time.Millisecond, 0, -time.Second, 0, 2 * time.Second, time.Millisecond}
	for _, step := range steps {
		clock = clock.Add(step)
		var err error
		if all, err = g.Next(all, 1000); err != nil {
			t.Fatal(err)
		}
	}
	prevText := ""
	for i, u := range all {
		if i > 0 && bytes.Compare(all[i-1][:], u[:]) >= 0 {
			t.Fatalf("uuid %d %x not above %x", i, u, all[i-1])
		}
		text := FormatUUID(u)
		if text <= prevText {
			t.Fatalf("text %s not above %s", text, prevText)
		}
		prevText = text
		back, ms, err := ParseUUIDv7([]byte(text))
		if err != nil || back != u {
			t.Fatalf("parse %s: %x %v", text, back, err)
		}
		if text[14] != '7' || !strings.Contains("89ab", text[19:20]) {
			t.Fatalf("%s: not version 7 variant 10", text)
		}
		if ms < 1_800_000_000_000 || ms > clock.UnixMilli() {
			t.Fatalf("%s: time %d outside the clock's range", text, ms)
		}
	}
	// After the step back the UUIDs kept the later millisecond.
	_, ms, _ := ParseUUIDv7([]byte(FormatUUID(all[3500])))
	if want := int64(1_800_000_000_001); ms != want {
		t.Fatalf("after a step back the time is %d, want the last one %d", ms, want)
	}
}

// TestUUIDv7CounterRollover: a counter at its end moves the time one
// millisecond ahead rather than wrapping below the last UUID.
func TestUUIDv7CounterRollover(t *testing.T) {
	clock := time.UnixMilli(1_800_000_000_000)
	g := NewUUIDv7(func() time.Time { return clock }, rand.Reader)
	first, _ := g.Next(nil, 1)
	g.counter = uuidCounterMax - 1
	more, err := g.Next(nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	prev := first[0]
	for _, u := range more {
		if bytes.Compare(prev[:], u[:]) >= 0 {
			t.Fatalf("%x not above %x", u, prev)
		}
		prev = u
	}
	_, ms, _ := ParseUUIDv7([]byte(FormatUUID(more[2])))
	if ms != clock.UnixMilli()+1 {
		t.Fatalf("after rollover time %d, want %d", ms, clock.UnixMilli()+1)
	}
}

func TestParseUUIDv7(t *testing.T) {
	// RFC 9562 appendix A.6's example.
	_, ms, err := ParseUUIDv7([]byte("017F22E2-79B0-7CC3-98C4-DC0C0C07398F"))
	if err != nil || ms != 0x017F22E279B0 {
		t.Fatalf("RFC example: ms %d err %v", ms, err)
	}
	for _, bad := range []string{
		"", "017F22E2-79B0-7CC3-98C4-DC0C0C07398",
		"017F22E2-79B0-4CC3-98C4-DC0C0C07398F", // version 4
		"017F22E2-79B0-7CC3-C8C4-DC0C0C07398F", // variant 110
		"017F22E2x79B0-7CC3-98C4-DC0C0C07398F",
		"017F22E2-79B0-7CC3-98C4-DC0C0C07398G",
		"253001380296392704",
	} {
		if _, _, err := ParseUUIDv7([]byte(bad)); err != ErrInvalidUUID {
			t.Errorf("%q: %v, want ErrInvalidUUID", bad, err)
		}
	}
}

func BenchmarkUUIDv7(b *testing.B) {
	g := NewUUIDv7(time.Now, rand.Reader)
	buf := make([][16]byte, 0, 1)
	for b.Loop() {
		buf, _ = g.Next(buf[:0], 1)
	}
}

// FuzzParseUUIDv7: DECODE hands any argument to ParseUUIDv7; it never
// panics, and what it accepts formats back to the same text (lower case)
// and the same time.
func FuzzParseUUIDv7(f *testing.F) {
	f.Add([]byte("017F22E2-79B0-7CC3-98C4-DC0C0C07398F"))
	f.Add([]byte("017f22e2-79b0-7cc3-98c4-dc0c0c07398f"))
	f.Add([]byte("253001380296392704"))
	f.Add([]byte("017F22E2-79B0-4CC3-98C4-DC0C0C07398F"))
	f.Add([]byte("------------------------------------"))
	f.Fuzz(func(t *testing.T, s []byte) {
		u, ms, err := ParseUUIDv7(s)
		if err != nil {
			return
		}
		if got := FormatUUID(u); got != strings.ToLower(string(s)) {
			t.Fatalf("%q parsed and formatted is %q", s, got)
		}
		if ms < 0 || ms >= 1<<48 {
			t.Fatalf("%q: time %d outside 48 bits", s, ms)
		}
	})
}
