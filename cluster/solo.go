package cluster

import "github.com/hashicorp/raft"

// standAtOnce makes a single voter lead itself now. hashicorp/raft's
// follower waits a randomized heartbeat timeout (500 ms to 1 s by default)
// before it stands for election, even when it is the configuration's only
// voter, so a one-node cluster's every start cost that wait. Lowering the
// heartbeat timeout wakes the follower loop (Raft.ReloadConfig notifies
// it), which finds no leader heard from in this process and stands at
// once; with one voter its own vote elects it. The timeout is then set
// back: only this first wait is cut. An election is safe whenever it
// happens (Raft's safety never rests on timing), and with no other voter
// there is no leader to disrupt. A larger configuration is left alone.
func (c *Cluster) standAtOnce() {
	if !c.Alone() {
		return
	}
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil || cf.Configuration().Servers[0].Suffrage != raft.Voter {
		return
	}
	normal := c.raft.ReloadableConfig()
	shorter := normal
	shorter.HeartbeatTimeout = normal.HeartbeatTimeout - 1 // any shorter value wakes the loop; the lease timeout bounds it below
	if err := c.raft.ReloadConfig(shorter); err != nil {
		c.log.Debug("could not shorten the first election of a single voter", "err", err)
		return
	}
	if err := c.raft.ReloadConfig(normal); err != nil {
		c.log.Warn("could not set the heartbeat timeout back", "err", err)
	}
}
