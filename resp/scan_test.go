package resp

import (
	"strings"
	"testing"
	"time"
)

func TestGlobMatchAsRedis(t *testing.T) {
	for _, tc := range []struct {
		pattern, str string
		want         bool
	}{
		{"*", "", false}, {"*", "orders", true}, {"ord*", "orders", true}, {"*ers", "orders", true},
		{"o?ders", "orders", true}, {"o?ders", "oders", false}, {"[ou]rders", "urders", true},
		{"[^o]rders", "orders", false}, {"[a-c]x", "bx", true}, {"[c-a]x", "bx", true},
		{"h\\*llo", "h*llo", true}, {"h\\*llo", "hallo", false}, {"[\\]]", "]", true},
		{"a*b*c", "aXXbYYc", true}, {"a*b*c", "aXXbYY", false}, {"[abc", "a", true},
		{"", "", true}, {"", "a", false}, {"abc", "ab", false},
	} {
		if got := globMatch([]byte(tc.pattern), []byte(tc.str), false); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.str, got, tc.want)
		}
	}
	// Many stars against a long tag that does not match: no backtracking blow-up.
	start := time.Now()
	globMatch([]byte(strings.Repeat("a*", 200)+"b"), []byte(strings.Repeat("a", 256)), false)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("pathological pattern took %v", d)
	}
}
