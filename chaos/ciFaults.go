package chaos

// ciFaults are the fault kinds TestCampaign injects.
var ciFaults = AllFaults

// knownOpen are anomaly kinds today's main is known to show, each with the
// open issue that fixes it. TestCampaign logs them in full and does not
// fail on them; delete an entry when its fix lands, so the campaign guards
// it from then on. not-linearizable is excused only in a run that also
// shows below-floor (SET's floor not holding makes a tag's history
// non-linearizable); on its own it fails the test.
var knownOpen = map[string]string{
	"below-floor": "issue 7, item 5: SET answers OK before every member dropped its buffered values below the floor",
	"membership":  "issue 7, items 2 and 3: an empty directory under a member's node ID, and a joiner with another layout, are accepted",
	"set-refused": "SPEC section 3 (SET succeeds unless a value above v was issued): today's main refuses SET below its reserved high-water",
}

// excused says why an anomaly kind does not fail TestCampaign, or "".
func excused(kind string, counts map[string]int) string {
	if kind == "not-linearizable" && counts["below-floor"] > 0 {
		return "follows from below-floor (" + knownOpen["below-floor"] + ")"
	}
	return knownOpen[kind]
}
