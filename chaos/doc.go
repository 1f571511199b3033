// Package chaos runs a seeded, randomized fault campaign against real
// idserver processes on loopback and checks every acknowledged reply.
//
// A campaign builds cmd/idserver once, starts a cluster of processes (the
// first bootstraps, the others --join it), drives clients on every node with
// a random mix of NEXTID, GENEID, INCR, INCRBY, NEXTSEG, SET and GET, and lets
// a nemesis inject faults random in kind, target and timing: kill -9 and
// restart, SIGSTOP/SIGCONT, partitions between nodes (iptables rules matched
// on each node's Unix user and loopback address), clock steps through DEBUG
// CLOCK, membership changes (FORGET of a live node, a wiped directory
// rejoining under the same or a new node ID, a joiner with another layout),
// a full disk, and power cuts of one node or all at once (data directories
// on lazyfs, which drops every write not synced).
// The same seed replays the same schedule of operations and faults; the
// interleaving with the real processes differs from run to run.
//
// The checker reads the whole history afterwards: no ID or value
// acknowledged twice, per-node order, disjoint segments, SET floors,
// per-tag linearizability with porcupine, CLOCKBACK only where the clock went
// back, and every node answering once the last fault heals. An anomaly is
// reported with the seed and the shortest history excerpt that shows it.
//
// Entry points: TestCampaign (a short run) and cmd/chaos (a long one).
package chaos
