package importer

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Counter is one counter read from a source.
type Counter struct {
	// Key is the tag it becomes in idserver.
	Key string
	// Value is the highest value the source may have handed out: the
	// tag's floor, before any margin.
	Value int64
	// Refused, when not empty, says why the key is not imported (and
	// Value is meaningless).
	Refused string
}

// Refusal is a key that an import left out, and why.
type Refusal struct {
	Key, Reason string
}

func (r Refusal) String() string { return fmt.Sprintf("%q: %s", r.Key, r.Reason) }

// ParseValue reads a counter's value as the source stores it (a decimal
// integer) and returns it, or a reason to refuse it: not an integer,
// negative, or above 2^63-1.
func ParseValue(raw string) (int64, string) {
	v, err := strconv.ParseInt(raw, 10, 64)
	if err == nil {
		if v < 0 {
			return 0, fmt.Sprintf("value %q is negative (idserver's values are 0 to 9223372036854775807)", raw)
		}
		return v, ""
	}
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		if strings.HasPrefix(raw, "-") {
			return 0, fmt.Sprintf("value %q is negative (idserver's values are 0 to 9223372036854775807)", raw)
		}
		return 0, fmt.Sprintf("value %q is above 9223372036854775807 (2^63-1)", raw)
	}
	return 0, fmt.Sprintf("value %q is not an integer", clip(raw))
}

// MaxKey is the longest tag idserver takes, in bytes.
const MaxKey = 256

// checkKey is a reason to refuse key as a tag, or "".
func checkKey(key string) string {
	if key == "" || len(key) > MaxKey {
		return fmt.Sprintf("a tag is 1 to %d bytes, this key is %d", MaxKey, len(key))
	}
	return ""
}

// addMargin is v+margin, or a reason when the sum passes 2^63-1.
func addMargin(v, margin int64) (int64, string) {
	if margin > math.MaxInt64-v {
		return 0, fmt.Sprintf("value %d plus --margin %d is above 9223372036854775807 (2^63-1)", v, margin)
	}
	return v + margin, ""
}

// clip shortens a value for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
