package chaos

import "slices"

// ciFaults are the fault kinds TestCampaign's seeded run injects: all but
// scale-down and partition-removed, which take --dead-member-after or more
// each (most of a 25 s run) and which its membership run scripts, and
// island, which runs in long campaigns only: a FORGET the isolated leader
// answered TRYAGAIN can still take effect once the island heals (the
// leader appended it, and may lead again), after which two members keep
// one voter, and a later minority-damage of that voter leaves the cluster
// without a quorum that the repair cannot restore.
var ciFaults = slices.DeleteFunc(slices.Clone(AllFaults), func(k string) bool {
	return k == FScaleDown || k == FRemoveCutLive || k == FIsland
})

// coverFaults start the schedule of TestCampaign's seeded run, one of
// each, so that its short run injects them whatever the seed draws.
var coverFaults = []string{FCPUStarve, FFileDamage}

// knownOpen are anomaly kinds today's main is known to show, each with the
// open issue that fixes it. TestCampaign logs them in full and does not
// fail on them; delete an entry when its fix lands, so the campaign guards
// it from then on.
var knownOpen = map[string]string{}

// excused says why an anomaly kind does not fail TestCampaign, or "".
func excused(kind string, counts map[string]int) string {
	return knownOpen[kind]
}
