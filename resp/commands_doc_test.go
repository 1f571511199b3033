package resp

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDocsCommandTablesMatchTheCommandTable: every command named in the
// tables of docs/commands.md headed "| command | reply |" is in the command
// table, and every command in the table is named in one of them.
func TestDocsCommandTablesMatchTheCommandTable(t *testing.T) {
	text, err := os.ReadFile("../docs/commands.md")
	if err != nil {
		t.Fatalf("docs/commands.md is the command reference: %v", err)
	}
	inDocs := map[string]bool{}
	tables := 0
	inTable := false
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case strings.TrimSpace(line) == "| command | reply |":
			tables++
			inTable = true
			continue
		case !strings.HasPrefix(line, "|"):
			inTable = false
		}
		if !inTable {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 2 {
			continue // the |---|---| line
		}
		// The first cell names commands: the first word of each `...` span.
		for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9]*)[^`]*`").FindAllStringSubmatch(cells[0], -1) {
			inDocs[strings.ToLower(m[1])] = true
		}
	}
	if tables == 0 {
		t.Fatal(`docs/commands.md has no table headed "| command | reply |"`)
	}
	loadCommandTable()
	var missing, extra []string
	for name := range commandTable {
		if !inDocs[name] {
			missing = append(missing, strings.ToUpper(name))
		}
	}
	for name := range inDocs {
		if commandTable[name] == nil {
			extra = append(extra, strings.ToUpper(name))
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("docs/commands.md (%d command tables): served but not documented %v; documented but not served %v", tables, missing, extra)
	}
	t.Logf("%d commands, in %d tables of docs/commands.md", len(commandTable), tables)
}
