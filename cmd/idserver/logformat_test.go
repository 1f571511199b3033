package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"testing"
)

// TestJSONLogKeepsBytes: a value that is not UTF-8 is written Go-quoted in
// a JSON log line, so the line is JSON and the bytes can be read back.
func TestJSONLogKeepsBytes(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: quoteNonUTF8}))
	log.Warn("x", "tag", "a\xffb", "err", errors.New("tag \xfe: refused"), "plain", "é")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	for key, want := range map[string]string{"tag": "a\xffb", "err": "tag \xfe: refused"} {
		got, err := strconv.Unquote(line[key].(string))
		if err != nil || got != want {
			t.Errorf("%s: %q reads back as %q (%v), want %q", key, line[key], got, err, want)
		}
	}
	if line["plain"] != "é" {
		t.Errorf("a UTF-8 value changed: %q", line["plain"])
	}
}
