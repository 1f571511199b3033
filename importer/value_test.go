package importer

import (
	"math"
	"strings"
	"testing"
)

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want int64
		why  string // a part of the refusal, "" when accepted
	}{
		{"0", 0, ""},
		{"42", 42, ""},
		{"9223372036854775807", math.MaxInt64, ""},
		{"9223372036854775808", 0, "above 9223372036854775807"},
		{"-1", 0, "negative"},
		{"-99999999999999999999", 0, "negative"},
		{"abc", 0, "not an integer"},
		{"", 0, "not an integer"},
		{"1.5", 0, "not an integer"},
		{" 7", 0, "not an integer"},
	} {
		v, why := ParseValue(tc.raw)
		if tc.why == "" && (why != "" || v != tc.want) {
			t.Errorf("ParseValue(%q) = %d, %q; want %d", tc.raw, v, why, tc.want)
		}
		if tc.why != "" && !strings.Contains(why, tc.why) {
			t.Errorf("ParseValue(%q) refusal %q; want it to say %q", tc.raw, why, tc.why)
		}
	}
}

func TestAddMarginRefusesOverflow(t *testing.T) {
	if v, why := addMargin(10, 5); v != 15 || why != "" {
		t.Errorf("addMargin(10, 5) = %d, %q", v, why)
	}
	if _, why := addMargin(math.MaxInt64-4, 5); !strings.Contains(why, "--margin") {
		t.Errorf("addMargin past 2^63-1: %q", why)
	}
}

func TestSequenceFloor(t *testing.T) {
	for _, tc := range []struct {
		last             int64
		called           bool
		increment, cache int64
		want             int64
		why              string
	}{
		{last: 1, called: false, increment: 1, cache: 1, want: 1},    // fresh: nothing handed out, floor 0 + 1
		{last: 100, called: true, increment: 1, cache: 1, want: 101}, // 100 handed out
		{last: 100, called: true, increment: 1, cache: 20, want: 120},
		{last: 100, called: false, increment: 5, cache: 10, want: 145},
		{last: 100, called: true, increment: 10, cache: 3, want: 130},
		{last: 100, called: true, increment: -1, cache: 1, why: "descending"},
		{last: -5, called: true, increment: 1, cache: 1, why: "negative"},
		{last: math.MaxInt64 - 1, called: true, increment: 1, cache: 10, why: "above 9223372036854775807"},
	} {
		v, why := SequenceFloor(tc.last, tc.called, tc.increment, tc.cache)
		if tc.why == "" && (why != "" || v != tc.want) {
			t.Errorf("SequenceFloor(%d, %v, %d, %d) = %d, %q; want %d", tc.last, tc.called, tc.increment, tc.cache, v, why, tc.want)
		}
		if tc.why != "" && !strings.Contains(why, tc.why) {
			t.Errorf("SequenceFloor(%d, %v, %d, %d) refusal %q; want it to say %q", tc.last, tc.called, tc.increment, tc.cache, why, tc.why)
		}
	}
}
