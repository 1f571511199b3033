package chaos

import "strings"

// ciFaults are the fault kinds TestCampaign injects.
var ciFaults = AllFaults

// knownOpen are anomaly kinds today's main is known to show, each with the
// open issue that fixes it. TestCampaign logs them in full and does not
// fail on them; delete an entry when its fix lands, so the campaign guards
// it from then on. not-linearizable is excused only in a run that also
// shows below-floor or stale-get (either makes a tag's history
// non-linearizable); on its own it fails the test.
var knownOpen = map[string]string{
	"below-floor":               "issue 7, item 5: SET answers OK before every member dropped its buffered values below the floor",
	"duplicate-id-forgotten":    "issue 7, item 4: a node forgotten while it runs issues under the worker ID its replacement was given",
	"duplicate-id-wrong-layout": "issue 7, item 3: a joiner with another layout is accepted and issues IDs that collide",
	"membership":                "issue 7, items 2 and 3: an empty directory under a member's node ID, and a joiner with another layout, are accepted",
	"set-refused":               "SPEC section 3 (SET succeeds unless a value above v was issued): today's main refuses SET below its reserved high-water",
	"unavailable-fsm-lock":      "issue 7, item 6: SET racing an INCRBY above the step deadlocks a follower's state machine (the goroutine dump is in the report)",
	"clockback":                 "issue 7, item 8: NEXTID 10000 from several connections answers CLOCKBACK with a healthy clock",
	"exit-on-full-disk":         "found by this campaign, spec silent: a member whose disk fills exits (pebble: fatal commit error); restarted, it recovers",
	"stale-get":                 "found by this campaign, not yet filed: GET on a node cut off from the leader answers its own stale state machine (cluster.High's fallback)",
}

// excused says why an anomaly kind does not fail TestCampaign, or "".
func excused(kind string, counts map[string]int) string {
	if strings.HasSuffix(kind, afterMistake) {
		return "follows a membership mistake the cluster accepted (" + knownOpen["membership"] + ")"
	}
	if kind == "not-linearizable" && counts["below-floor"]+counts["stale-get"] > 0 {
		return "follows from below-floor or stale-get"
	}
	return knownOpen[kind]
}
