package resp

import (
	"strconv"
	"testing"
)

// FuzzParseInt64: parseInt64 accepts exactly the canonical decimal int64s
// (what Redis's string2ll accepts), and agrees with strconv on them.
func FuzzParseInt64(f *testing.F) {
	for _, seed := range []string{"0", "-1", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "+1", "01", "-0", " 1", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseInt64([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		canonical := err == nil && strconv.FormatInt(want, 10) == s
		if ok != canonical || (ok && got != want) {
			t.Fatalf("parseInt64(%q) = %d, %v; strconv: %d, %v (canonical %v)", s, got, ok, want, err, canonical)
		}
	})
}
