package node

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// peerState is what one other address of --join says of itself when the
// first pod of a StatefulSet decides whether to bootstrap.
type peerState int

const (
	peerAbsent  peerState = iota // accepts no connection
	peerFresh                    // answers, and holds no cluster: a pod starting for the first time, waiting to join
	peerMember                   // answers with a cluster ID: a cluster exists to join
	peerUnknown                  // accepts a connection but gives no answer (yet)
)

// bootstrapProbe is how long the first pod of a --join list tries the
// others before it concludes that none runs.
const bootstrapProbe = 3 * time.Second

// anyPeerHoldsACluster reports whether the first pod of --join must join
// rather than bootstrap: some other address answers as the member of a
// cluster within bootstrapProbe, or accepts a connection without answering
// until the end of it (a member still opening its directory). Addresses
// that accept no connection, and pods that answer with no cluster ID (the
// other pods of a StatefulSet created with podManagementPolicy Parallel,
// each waiting to join), leave the first pod to bootstrap: none of them
// ever bootstraps, so without it they would wait for each other forever.
// It gives up early when ctx ends.
func (n *Node) anyPeerHoldsACluster(ctx context.Context) bool {
	deadline := time.Now().Add(bootstrapProbe)
	for {
		unknown := false
		for _, a := range n.joinAddrs() {
			switch n.peerState(ctx, a) {
			case peerMember:
				return true
			case peerUnknown:
				unknown = true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return unknown
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// peerState asks addr, as a client with the cluster's password, for its
// INFO cluster, which a node answers while it starts too. It gives up when
// ctx ends.
func (n *Node) peerState(ctx context.Context, addr string) peerState {
	dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	c, err := new(net.Dialer).DialContext(dctx, "tcp", addr)
	dcancel()
	if err != nil {
		return peerAbsent
	}
	c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := n.clusterInfo(ctx, addr)
	var re redis.Error
	switch {
	case errors.As(err, &re):
		// An answer, but not INFO's (a wrong password, another server):
		// it is something, and this pod must not start a cluster beside it.
		return peerMember
	case err != nil:
		return peerUnknown
	}
	id, ok := info["cluster_id"]
	if ok && id == "" {
		return peerFresh
	}
	return peerMember // a cluster ID, or no cluster_id line: not an idserver this pod knows how to read
}

// clusterInfo asks addr, a RESP port, as a client with the cluster's
// password, for its INFO cluster, as key:value pairs. An error reply is a
// redis.Error. It gives up when ctx ends.
func (n *Node) clusterInfo(ctx context.Context, addr string) (map[string]string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: n.cfg.RequirePass, TLSConfig: n.cfg.TLSClient,
		Protocol: 2, MaxRetries: -1, DisableIdentity: true, DialTimeout: 500 * time.Millisecond})
	defer rdb.Close()
	// go-redis ends a read at the context's deadline, not at its
	// cancellation: closing the client ends it then.
	defer context.AfterFunc(ctx, func() { rdb.Close() })()
	text, err := rdb.Info(ctx, "cluster").Result()
	if err != nil {
		return nil, err
	}
	info := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			info[k] = v
		}
	}
	return info, nil
}
