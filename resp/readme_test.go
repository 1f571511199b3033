package resp

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestReadmeCommandTableMatchesTheCode: every command in the table is
// served, and every served command is in the table.
func TestReadmeCommandTableMatchesTheCode(t *testing.T) {
	text, err := os.ReadFile("../README.md")
	if err != nil {
		t.Skipf("README.md not found: %v", err)
	}
	_, table, ok := strings.Cut(string(text), "\n## Commands\n")
	if !ok {
		t.Fatal("README has no ## Commands section")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	inTable := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) < 2 {
			continue
		}
		// The first cell names commands: the first word of each `...` span.
		for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9]*)[^`]*`").FindAllStringSubmatch(cells[0], -1) {
			inTable[strings.ToLower(m[1])] = true
		}
	}
	loadCommandTable()
	var missing, extra []string
	for name := range commandTable {
		if !inTable[name] {
			missing = append(missing, name)
		}
	}
	for name := range inTable {
		if commandTable[name] == nil {
			extra = append(extra, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("README command table: missing %v, not served %v", missing, extra)
	}
}
