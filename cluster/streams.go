package cluster

import (
	"context"
	"fmt"
	"net"
	"time"
)

// maxStreams is the most node-to-node streams a node holds open to one
// address, in use or idle. A request that finds them all in use waits for
// one to come back (until its deadline) instead of dialing: every dial
// costs the other node a handshake, and it runs at most maxHandshakes at
// once, closing the one that waited longest past them. Two other members
// opening maxStreams each at once stay within it (streams stay open once
// dialed, so a member handshakes only while it opens them); more streams
// than 16 keep forwarded SETs and GETs, which each wait for a commit or a
// read index, from queueing behind one another.
const maxStreams = 32

// streams is the node-to-node streams to one address.
type streams struct {
	idle  []net.Conn
	open  int           // idle and in use
	freed chan struct{} // closed, and replaced, when a stream goes back or closes
}

// free wakes the requests waiting for a stream; poolMu is held.
func (s *streams) free() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// takeConn takes an idle stream to addr, or dials one while fewer than
// maxStreams are open; otherwise it waits for one to come back, until
// ctx ends or the deadline. pooled says the stream was idle (it may be
// dead: its peer restarted).
func (c *Cluster) takeConn(ctx context.Context, addr string, deadline time.Time) (conn net.Conn, pooled bool, err error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.poolMu.Lock()
		if c.pool == nil { // closed: nothing is kept
			c.poolMu.Unlock()
			conn, err = c.mux.dial(addr, streamRPC, c.timing.Election*2)
			return conn, false, err
		}
		s := c.pool[addr]
		if s == nil {
			s = &streams{freed: make(chan struct{})}
			c.pool[addr] = s
		}
		if n := len(s.idle); n > 0 {
			conn = s.idle[n-1]
			s.idle = s.idle[:n-1]
			c.poolMu.Unlock()
			return conn, true, nil
		}
		if s.open < maxStreams {
			s.open++
			c.poolMu.Unlock()
			conn, err = c.mux.dial(addr, streamRPC, min(c.timing.Election*2, max(time.Until(deadline), time.Millisecond)))
			if err != nil {
				c.releaseConn(addr, nil, false)
			}
			return conn, false, err
		}
		freed := s.freed
		c.poolMu.Unlock()
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("waiting for one of its %d streams: %w", maxStreams, ctx.Err())
		case <-timer.C:
			return nil, false, fmt.Errorf("waiting for one of its %d streams: none came back in time", maxStreams)
		}
	}
}

// releaseConn gives back a stream takeConn gave: kept idle for the next
// request, or closed (conn nil: the dial failed).
func (c *Cluster) releaseConn(addr string, conn net.Conn, keep bool) {
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	s := c.pool[addr]
	if keep && s != nil {
		s.idle = append(s.idle, conn)
		s.free()
		return
	}
	if conn != nil {
		conn.Close()
	}
	if s != nil {
		s.open--
		s.free()
	}
}

// dropIdle closes the idle streams to addr.
func (c *Cluster) dropIdle(addr string) {
	c.poolMu.Lock()
	s := c.pool[addr]
	var idle []net.Conn
	if s != nil {
		idle, s.idle = s.idle, nil
		s.open -= len(idle)
		s.free()
	}
	c.poolMu.Unlock()
	for _, conn := range idle {
		conn.Close()
	}
}

// closeIdle closes the idle streams, for good: a stream in use closes
// when it comes back.
func (c *Cluster) closeIdle() {
	c.poolMu.Lock()
	pool := c.pool
	c.pool = nil
	c.poolMu.Unlock()
	for _, s := range pool {
		for _, conn := range s.idle {
			conn.Close()
		}
		close(s.freed)
	}
}
