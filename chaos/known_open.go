package chaos

// ciFaults are the fault kinds TestCampaign injects.
var ciFaults = AllFaults

// knownOpen are anomaly kinds today's main is known to show, each with the
// open issue that fixes it. TestCampaign logs them in full and does not
// fail on them; delete an entry when its fix lands, so the campaign guards
// it from then on. not-linearizable is excused only in a run that also
// shows below-floor-forgotten (which makes a tag's history
// non-linearizable); on its own it fails the test.
var knownOpen = map[string]string{
	"below-floor-forgotten": "README, Not there yet: a node forgotten while cut off may hand out its buffered values, and a SET after the FORGET does not reach it",
	"exit-on-full-disk":     "found by this campaign, spec silent: a member whose disk fills exits (pebble: fatal commit error); restarted, it recovers",
}

// excused says why an anomaly kind does not fail TestCampaign, or "".
func excused(kind string, counts map[string]int) string {
	if kind == "not-linearizable" && counts["below-floor-forgotten"] > 0 {
		return "follows from below-floor-forgotten"
	}
	return knownOpen[kind]
}
