package node

// startKind is how a start begins, decided from the directory and the
// flags before the cluster opens.
type startKind int

const (
	// startRestart: the directory holds a cluster; the node restarts as
	// the member it was (and checks in: with --join naming another
	// cluster, a one-node cluster of its own is refused).
	startRestart startKind = iota
	// startRestoredCopy: a restart on a directory that is a copy (its
	// marker says so): a one-node cluster refuses it; a member of a larger
	// one starts above what the cluster committed for it (lease.go).
	startRestoredCopy
	// startBootstrap: an empty directory without --join: a new one-node
	// cluster.
	startBootstrap
	// startJoin: an empty directory with --join: the node joins.
	startJoin
	// startFirstOfSet: an empty directory whose --join lists this node
	// first (a StatefulSet's pod 0) and none of the others answers: it
	// bootstraps the cluster the others join.
	startFirstOfSet
	// startRejoin: the cluster removed this node and its old state was
	// moved aside (MoveAside): it joins again as a new member, through
	// --join or the members it knew.
	startRejoin
	// startRefused: as startRejoin, with nobody to join through: on its
	// emptied directory it would otherwise bootstrap a cluster of its own,
	// handing out again the values its cluster did.
	startRefused
)

func (k startKind) String() string {
	return [...]string{"restart", "restored copy", "bootstrap", "join", "first of a StatefulSet", "rejoin after removal", "refused"}[k]
}

// startFacts is what decide reads.
type startFacts struct {
	clusterID   string   // the directory's cluster ID, "" when it holds none
	joinAddrs   []string // --join, without this node's own address
	firstOfJoin bool     // --join lists this node's address first
	movedAside  bool     // the directory holds what MoveAside moved there, and no cluster
	noteJoin    string   // the members a removed node recorded (removed/REJOIN.json), "" when none
	copied      string   // why the directory is a copy, "" when it is not
	// peersAnswer reports whether another address of --join answers; it
	// is asked only for the first of a --join list with an empty directory.
	peersAnswer func() bool
}

// startPlan is decide's answer.
type startPlan struct {
	kind startKind
	join string // the --join to use: cfg.Join, or the members a removed node recorded
	// joins: the cluster opens to be joined rather than bootstrapped when
	// its Raft state is empty.
	joins  bool
	copied string // why the directory is a copy, "" when it is not
}

// decide is how a start begins; join is cfg.Join.
func decide(f startFacts, join string) startPlan {
	p := decideKind(f, join)
	p.copied = f.copied
	return p
}

func decideKind(f startFacts, join string) startPlan {
	hasJoin := len(f.joinAddrs) > 0
	switch {
	case f.clusterID != "" && f.copied != "":
		return startPlan{kind: startRestoredCopy, join: join, joins: hasJoin}
	case f.clusterID != "":
		return startPlan{kind: startRestart, join: join, joins: hasJoin}
	case f.movedAside && hasJoin:
		return startPlan{kind: startRejoin, join: join, joins: true}
	case f.movedAside && f.noteJoin != "":
		// Its rejoin did not finish (refused, no answer, killed), and it
		// has no --join: it tries again through the members it knew.
		return startPlan{kind: startRejoin, join: f.noteJoin, joins: true}
	case f.movedAside:
		return startPlan{kind: startRefused, join: join}
	case !hasJoin:
		return startPlan{kind: startBootstrap, join: join}
	case f.firstOfJoin && !f.peersAnswer():
		// The first of the StatefulSet's pods, on its first start: nobody
		// to join, so it bootstraps. The same pod replaced later with an
		// empty volume finds its peers and joins (and should it ever start
		// a cluster of its own beside theirs, the first Raft stream of
		// theirs that reaches it stops it: OnConflict).
		return startPlan{kind: startFirstOfSet, join: join}
	}
	return startPlan{kind: startJoin, join: join, joins: true}
}
