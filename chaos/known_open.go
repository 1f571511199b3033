package chaos

import (
	"slices"
	"strings"
)

// ciFaults are the fault kinds TestCampaign's seeded run injects: all but
// scale-down and partition-removed, which take --dead-member-after or more
// each (most of a 25 s run) and which its membership run scripts.
var ciFaults = slices.DeleteFunc(slices.Clone(AllFaults), func(k string) bool { return k == FScaleDown || k == FRemoveCutLive })

// coverFaults start the schedule of TestCampaign's seeded run, one of
// each, so that its short run injects them whatever the seed draws.
var coverFaults = []string{FCPUStarve, FIsland, FFileDamage}

// knownOpen are anomaly kinds today's main is known to show, each with the
// open issue that fixes it. TestCampaign logs them in full and does not
// fail on them; delete an entry when its fix lands, so the campaign guards
// it from then on.
var knownOpen = map[string]string{}

// knownOpenInvalidUTF8 is why anomalies on tags whose names are not valid
// UTF-8 (kinds ending in invalidUTF8Tag) are known open: such a name is
// changed (each bad byte to U+FFFD) where it crosses JSON, in a request
// forwarded to another node (cluster/rpc.go request.Tag) and in the Raft
// snapshot (cluster/fsm.go snapshotState.Tags), so distinct tags share one
// counter and a restored tag loses its high-water. Delete the excuse when
// the fix lands.
const knownOpenInvalidUTF8 = "tag names that are not valid UTF-8 are changed where they cross JSON (forwarded requests, Raft snapshots): values are issued twice; no issue yet"

// excused says why an anomaly kind does not fail TestCampaign, or "".
func excused(kind string, counts map[string]int) string {
	if strings.HasSuffix(kind, invalidUTF8Tag) {
		return knownOpenInvalidUTF8
	}
	return knownOpen[kind]
}
