package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"idserver/engine"
)

// The Raft port carries two kinds of stream, told apart by the kind the
// dialer names in its hello (rqlite multiplexes its cluster service the
// same way): Raft's own RPCs, and node-to-node requests (allocation, SET,
// joins, leases). Clients never see the second kind: it is not on the RESP
// port.
const (
	streamRaft byte = 'R'
	streamRPC  byte = 'C'
)

// Every connection to the Raft port opens with a handshake in which each
// side proves it knows the cluster secret (--cluster-secret, or
// --requirepass), before a byte of a Raft RPC or a request is read:
//
//	dialer:   helloV1, kind, len(cluster ID), cluster ID, len(target), target, dialer nonce
//	acceptor: acceptor nonce
//	dialer:   HMAC-SHA256(secret, "dialer" | transcript)
//	acceptor: HMAC-SHA256(secret, "acceptor" | transcript), or proofRefused when the dialer's proof is wrong
//
// The target is the node ID a Raft stream's dialer reaches for at that
// address ("" when it does not know it, and for node-to-node requests): an
// acceptor of another node ID refuses it, so a new node at a member's
// address (a replaced pod with an empty disk) never stands in for that
// member in Raft, voting or acknowledging entries with a log it never had.
//
// The transcript is the kind, the dialer's cluster ID, the target and both nonces, so
// a proof is good for one connection, one direction and one kind only. The
// dialer proves first: a process without the secret gets nothing keyed by
// it (nothing to guess the secret from offline). The acceptor proves back:
// a node sends no request to, and takes no Raft answer from, a listener
// that does not know the secret. The secret never crosses the wire, and
// the cluster ID is no credential: it is read only once the proof holds,
// to keep two clusters' Raft traffic apart.
const (
	helloV1          byte = 'A' // the first byte of the handshake, version 1
	nonceSize             = 32
	handshakeTimeout      = 5 * time.Second // an acceptor's bound on the whole handshake
	maxHandshakes         = 64              // handshakes an acceptor runs at once; past it a new one closes the one that waited longest
)

// proofRefused is what an acceptor sends, in place of its proof, to a
// dialer whose proof is wrong, before it closes the connection: the dialer
// tells a wrong cluster secret from a connection closed before its
// handshake ended, which says nothing of the secret (closedEarly). It
// cannot be a proof: no HMAC output is a known constant.
var proofRefused = [sha256.Size]byte([]byte("idserver: proof refused, closing"))

// closedEarly is why an acceptor closes a connection before its handshake
// ends, other than a wrong proof.
var closedEarly = fmt.Sprintf("the node is busy with handshakes: it runs %d at once and closes the one that waited longest "+
	"to make room for another; or it is shutting down, or is of a build that closes without saying when the cluster secret differs", maxHandshakes)

// handshake is what both ends of one connection prove over.
type handshake struct {
	kind                       byte
	cluster                    string // the dialer's cluster ID, "" before it belongs to one
	target                     string // the node ID the dialer reaches for, "" when unknown
	dialerNonce, acceptorNonce [nonceSize]byte
}

// proof is role's HMAC over the transcript, keyed by the cluster secret.
func (h *handshake) proof(secret []byte, role string) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("idserver raft port v1 " + role + "\x00"))
	mac.Write([]byte{h.kind, byte(len(h.cluster))})
	mac.Write([]byte(h.cluster))
	mac.Write([]byte{byte(len(h.target))})
	mac.Write([]byte(h.target))
	mac.Write(h.dialerNonce[:])
	mac.Write(h.acceptorNonce[:])
	return mac.Sum(nil)
}

// openAsDialer runs the dialer's side of the handshake on conn, whose
// deadline the caller has set.
func (m *mux) openAsDialer(conn net.Conn, kind byte, target string) error {
	h := handshake{kind: kind, cluster: m.clusterID(), target: target}
	rand.Read(h.dialerNonce[:])
	hello := append([]byte{helloV1, kind, byte(len(h.cluster))}, h.cluster...)
	hello = append(append(hello, byte(len(target))), target...)
	if _, err := conn.Write(append(hello, h.dialerNonce[:]...)); err != nil {
		return err
	}
	if _, err := io.ReadFull(conn, h.acceptorNonce[:]); err != nil {
		return fmt.Errorf("no handshake from the node (%s, or not an idserver with the handshake): %v", closedEarly, err)
	}
	if _, err := conn.Write(h.proof(m.secret, "dialer")); err != nil {
		return err
	}
	theirs := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, theirs); err != nil {
		return fmt.Errorf("the node closed the connection before the handshake ended (%s): %v", closedEarly, err)
	}
	if hmac.Equal(theirs, proofRefused[:]) {
		return fmt.Errorf("%w: the node refused this node's proof (is --cluster-secret, or --requirepass, the same on every node?)", ErrAuth)
	}
	if !hmac.Equal(theirs, h.proof(m.secret, "acceptor")) {
		return fmt.Errorf("%w: the node's proof is wrong: it does not know the cluster secret", ErrAuth)
	}
	return nil
}

// openAsAcceptor runs the accepting side of the handshake on conn, whose
// deadline the caller has set; an error is why the connection is refused.
func (m *mux) openAsAcceptor(conn net.Conn) (*handshake, error) {
	var hdr [3]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return nil, fmt.Errorf("no hello: %w", err)
	}
	if hdr[0] != helloV1 {
		return nil, fmt.Errorf("opened with %q, not the handshake (not an idserver node, or one without the handshake)", hdr[0])
	}
	if hdr[1] != streamRaft && hdr[1] != streamRPC {
		return nil, fmt.Errorf("unknown stream kind %q", hdr[1])
	}
	rest := make([]byte, int(hdr[2])+1)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return nil, fmt.Errorf("short hello: %w", err)
	}
	h := &handshake{kind: hdr[1], cluster: string(rest[:hdr[2]])}
	rest = make([]byte, int(rest[hdr[2]])+nonceSize)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return nil, fmt.Errorf("short hello: %w", err)
	}
	h.target = string(rest[:len(rest)-nonceSize])
	copy(h.dialerNonce[:], rest[len(rest)-nonceSize:])
	rand.Read(h.acceptorNonce[:])
	if _, err := conn.Write(h.acceptorNonce[:]); err != nil {
		return nil, err
	}
	theirs := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, theirs); err != nil {
		return nil, fmt.Errorf("no proof: %w", err)
	}
	if !hmac.Equal(theirs, h.proof(m.secret, "dialer")) {
		conn.Write(proofRefused[:])
		return nil, errors.New("wrong proof: the dialer does not know the cluster secret")
	}
	if _, err := conn.Write(h.proof(m.secret, "acceptor")); err != nil {
		return nil, err
	}
	return h, nil
}

// Network is how the Raft port is served and reached: TCP, TLS, or a
// test's network that it can cut.
type Network interface {
	net.Listener
	Dial(addr string, timeout time.Duration) (net.Conn, error)
}

// tcpNetwork is TCP, or TLS when conf is set.
type tcpNetwork struct {
	net.Listener
	conf *tls.Config
}

func (n tcpNetwork) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if n.conf != nil {
		return tls.DialWithDialer(d, "tcp", addr, n.conf) // a self-connection fails its handshake and closes
	}
	c, err := d.Dial("tcp", addr)
	if err == nil && c.LocalAddr().String() == c.RemoteAddr().String() {
		// A peer's port in the ephemeral range, while nothing listens
		// there, can connect to itself (TCP simultaneous open): the
		// connection would keep the port from the peer when it restarts.
		c.Close()
		return nil, fmt.Errorf("dial %s: connected to itself (nothing listens there)", addr)
	}
	return c, err
}

// mux routes the streams accepted on the Raft port, once their dialer has
// proved it knows the cluster secret. A Raft stream is taken only when its
// dialer names this node's cluster: a node that belongs to no cluster yet
// (a joiner not yet admitted, a replaced disk) takes none, so an empty log
// never votes, and two clusters never exchange Raft RPCs.
type mux struct {
	net       Network
	addr      net.Addr                     // advertised Raft address
	nodeID    string                       // this node's ID: a Raft stream for another is refused
	nodeAt    func(raftAddr string) string // the member at a Raft address, "" when unknown (nil: unknown)
	secret    []byte                       // the cluster secret: every connection proves it knows it
	log       *slog.Logger
	clusterID func() string
	serveRPC  func(net.Conn)
	refused   func(from, theirs string) // an authenticated Raft stream of another cluster
	raftConns chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
	connsMu   sync.Mutex
	conns     map[net.Conn]struct{} // node-to-node streams being served
	unproved  atomic.Int64          // connections refused at the handshake
	pendingMu sync.Mutex
	pending   []*opening   // handshakes under way, the one that waited longest first
	lastLog   atomic.Int64 // when the last of them was logged, Unix ns
}

// Accept failures (out of file descriptors, or the like) are retried after
// a pause that starts at acceptBackoffMin and doubles up to
// acceptBackoffMax: the port takes Raft and node-to-node traffic again
// once the cause is gone. They are logged at most once per
// acceptLogInterval, with the count since the last line.
const (
	acceptBackoffMin  = 5 * time.Millisecond
	acceptBackoffMax  = time.Second
	acceptLogInterval = 10 * time.Second
)

// run accepts connections on the Raft port until the mux is closed.
func (m *mux) run() {
	var (
		backoff time.Duration
		failed  int64     // failures in a row
		folded  int64     // of them, those not logged
		logged  time.Time // when the last line was logged
	)
	for {
		conn, err := m.net.Accept()
		if err == nil {
			if failed > 0 {
				m.log.Info("the Raft port accepts connections again", "failures", failed)
			}
			backoff, failed, folded = 0, 0, 0
			go m.route(conn)
			continue
		}
		select {
		case <-m.closed:
			return
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			m.Close()
			return
		}
		backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
		failed++
		if time.Since(logged) < acceptLogInterval {
			folded++
		} else {
			m.log.Warn("the Raft port cannot accept a connection; retrying", "err", err, "retry_in", backoff, "folded", folded)
			logged, folded = time.Now(), 0
		}
		t := time.NewTimer(backoff)
		select {
		case <-m.closed:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (m *mux) route(conn net.Conn) {
	o := m.begin(conn)
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	h, err := m.openAsAcceptor(conn)
	if m.end(o) {
		conn.Close()
		m.logRefusal(busyMsg, conn.RemoteAddr().String(),
			fmt.Errorf("closed to make room: %d handshakes under way, this one the longest", maxHandshakes))
		return
	}
	if err != nil {
		conn.Close()
		m.logRefusal(unprovedMsg, conn.RemoteAddr().String(), err)
		return
	}
	conn.SetDeadline(time.Time{})
	switch h.kind {
	case streamRaft:
		// The cluster first: a node that bootstrapped a cluster of its own at
		// a member's address is told of the conflict (and stops) whatever
		// node the stream names, which is the old member's, not its own.
		if mine := m.clusterID(); mine == "" || h.cluster != mine {
			m.refused(conn.RemoteAddr().String(), h.cluster)
			conn.Close()
			return
		}
		if h.target != "" && h.target != m.nodeID {
			conn.Close()
			m.logRefusal("refused a Raft stream for another node", conn.RemoteAddr().String(), fmt.Errorf("a Raft stream for node %s reached node %s at its address "+
				"(a new node at a member's address: the member must be removed first)", h.target, m.nodeID))
			return
		}
		select {
		case m.raftConns <- conn:
		case <-m.closed:
			conn.Close()
		}
	case streamRPC:
		if !m.track(conn, true) {
			return
		}
		defer m.track(conn, false)
		m.serveRPC(conn)
	}
}

const (
	unprovedMsg = "refused a connection to the Raft port: no proof of the cluster secret"
	busyMsg     = "closed a connection to the Raft port before its handshake ended: too many handshakes under way"
)

// opening is one handshake under way.
type opening struct {
	conn    net.Conn
	evicted bool // closed to make room for a newer one
}

// begin counts conn's handshake as under way. Past maxHandshakes it closes
// the one that has waited longest, not the new one: a node with the secret
// finishes its handshake in a round trip, while a silent connection waits
// out its deadline, so a process that keeps maxHandshakes connections silent
// (opening one again as each is closed) would otherwise keep every node out
// of the Raft port: no vote, no join, no restart's lease renewal.
func (m *mux) begin(conn net.Conn) *opening {
	o := &opening{conn: conn}
	m.pendingMu.Lock()
	defer m.pendingMu.Unlock()
	if len(m.pending) >= maxHandshakes {
		oldest := m.pending[0]
		m.pending = m.pending[1:]
		oldest.evicted = true
		oldest.conn.Close() // its openAsAcceptor fails at once
	}
	m.pending = append(m.pending, o)
	return o
}

// underWay is the number of handshakes under way.
func (m *mux) underWay() int {
	m.pendingMu.Lock()
	defer m.pendingMu.Unlock()
	return len(m.pending)
}

// end takes o's handshake off the ones under way; true when it was closed
// to make room (its handshake failed, or its connection is closed).
func (m *mux) end(o *opening) (evicted bool) {
	m.pendingMu.Lock()
	defer m.pendingMu.Unlock()
	for i, p := range m.pending {
		if p == o {
			m.pending = append(m.pending[:i], m.pending[i+1:]...)
			break
		}
	}
	return o.evicted
}

// logRefusal logs a connection refused at the handshake (msg says why): the first ten,
// then one in a hundred, or the next one a minute after the last line, each
// line with the count so far (a flood costs no more than a line per
// hundred connections).
func (m *mux) logRefusal(msg, from string, why error) {
	select {
	case <-m.closed:
		return // closing: the handshakes under way fail
	default:
	}
	n, now := m.unproved.Add(1), time.Now().UnixNano()
	if n > 10 && n%100 != 0 && now-m.lastLog.Load() < int64(time.Minute) {
		return
	}
	m.lastLog.Store(now)
	m.log.Warn(msg,
		"from", from, "reason", why.Error(), "refused_so_far", n)
}

// track adds or removes a served stream; false when the mux is closed.
func (m *mux) track(conn net.Conn, add bool) bool {
	m.connsMu.Lock()
	defer m.connsMu.Unlock()
	if !add {
		delete(m.conns, conn)
		conn.Close()
		return true
	}
	select {
	case <-m.closed:
		conn.Close()
		return false
	default:
	}
	m.conns[conn] = struct{}{}
	return true
}

// dial opens a stream of kind to the Raft port at addr, handshake done.
func (m *mux) dial(addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	target := ""
	if kind == streamRaft && m.nodeAt != nil {
		target = m.nodeAt(addr)
	}
	conn, err := m.net.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(timeout))
	if err := m.openAsDialer(conn, kind, target); err != nil {
		conn.Close()
		return nil, fmt.Errorf("raft port %s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// Close stops accepting and closes the served node-to-node streams.
func (m *mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.closed)
		err = m.net.Close()
		m.connsMu.Lock()
		for c := range m.conns {
			c.Close()
		}
		m.connsMu.Unlock()
	})
	return err
}

// raftStream is the mux as Raft's stream layer.
type raftStream struct{ m *mux }

func (s raftStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.m.raftConns:
		return c, nil
	case <-s.m.closed:
		return nil, net.ErrClosed
	}
}

func (s raftStream) Close() error   { return s.m.Close() }
func (s raftStream) Addr() net.Addr { return s.m.addr }

func (s raftStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.m.dial(string(addr), streamRaft, timeout)
}

// Node-to-node requests: one typed request, one typed response, as
// length-prefixed JSON frames on a streamRPC connection.

type op uint8

const (
	opIdentify  op = iota + 1 // who are you: node, cluster, layout, worker
	opAdmit                   // you are being admitted to cluster X
	opJoin                    // leader: check and add a member
	opForget                  // leader: remove a member
	opAlloc                   // leader: allocate values
	opSet                     // leader: raise a floor on every member
	opLease                   // leader: extend a worker lease
	opHigh                    // leader: a tag's high-water
	opApplied                 // any: wait until an index is published here
	opFence                   // any: drop a tag's buffered values, answer the largest handed out (before a SET commits)
	opForgotten               // any: the leader is forgetting you
	opStats                   // any: your Raft progress, for autopilot (with the leader's view of every member)
	opIssued                  // any: answer the largest value of a tag handed out, dropping nothing (before a SET fences)
	opFresh                   // leader: a fresh worker ID for a clock that went back (freshworker.go)
	opFloors                  // leader: an MSET's floors, one entry (floors.go)
	opFenceTags               // any: opFence for several tags (before an MSET commits); with none, says this member knows entryFloors and entryMaxTags
	opJoinVia                 // any: a joiner's opJoin, from a node of no cluster yet; a follower sends it on to the leader
)

// code is an error's sentinel on the wire.
type code uint8

const (
	codeOK code = iota
	codeFailed
	codeNoLeader
	codeRefused
	codeNotMember
	codeUnconfirmed
	codeWouldGoBack
	codeOverflow
	codeAuth
	codeTagLimit
)

var codeErrors = []struct {
	code code
	err  error
}{
	{codeNoLeader, ErrNoLeader},
	{codeRefused, ErrRefused},
	{codeNotMember, ErrNotMember},
	{codeUnconfirmed, ErrUnconfirmed},
	{codeWouldGoBack, engine.ErrWouldGoBack},
	{codeOverflow, engine.ErrOverflow},
	{codeAuth, ErrAuth},
	{codeTagLimit, ErrTagLimit},
}

// noLeaderCauses are the causes of ErrNoLeader on the wire, in the cause
// field beside codeNoLeader (a node that does not know the field still
// reads codeNoLeader).
var noLeaderCauses = []struct {
	code code
	err  error
}{
	{1, ErrLeaderUnknown},
	{2, ErrNotLeader},
	{3, ErrLeadershipUnconfirmed},
	{4, ErrNotApplied},
	{5, engine.ErrLeaseEnded},
	{6, engine.ErrRefillLate},
}

// refusedCauses are the causes of ErrRefused on the wire, in the cause
// field beside codeRefused (a node that does not know the field still
// reads codeRefused).
var refusedCauses = []struct {
	code code
	err  error
}{
	{1, ErrRemoved},
}

func codeOf(err error) code {
	if err == nil {
		return codeOK
	}
	for _, ce := range codeErrors {
		if errors.Is(err, ce.err) {
			return ce.code
		}
	}
	return codeFailed
}

// wireError is an error as a response carries it: its sentinel's code
// and its text; for ErrNoLeader also its cause's code and its detail, for
// ErrRefused its cause's code.
type wireError struct {
	Code   code   `json:"code,omitempty"`
	Msg    string `json:"msg,omitempty"`
	Cause  code   `json:"cause,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func wireErrorOf(err error) wireError {
	if err == nil {
		return wireError{}
	}
	w := wireError{Code: codeOf(err), Msg: err.Error()}
	var nl *engine.NoLeaderError
	if errors.As(err, &nl) {
		w.Detail = nl.Detail
		for _, ce := range noLeaderCauses {
			if errors.Is(nl.Cause, ce.err) {
				w.Cause = ce.code
			}
		}
	}
	if w.Code == codeRefused {
		for _, ce := range refusedCauses {
			if errors.Is(err, ce.err) {
				w.Cause = ce.code
			}
		}
	}
	return w
}

// remoteError is an error another node answered: its text, and its
// sentinels for errors.Is (for ErrNoLeader, an *engine.NoLeaderError with
// its cause and detail, for errors.Is and errors.As; for ErrRefused, its
// cause beside it).
type remoteError struct {
	sentinels []error
	msg       string
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.sentinels }

// err is the error w carries, nil for none.
func (w wireError) err() error {
	if w.Code == codeOK {
		return nil
	}
	if w.Code == codeNoLeader {
		nl := &engine.NoLeaderError{Detail: w.Detail}
		for _, ce := range noLeaderCauses {
			if ce.code == w.Cause {
				nl.Cause = ce.err
			}
		}
		return &remoteError{[]error{nl}, w.Msg}
	}
	if w.Code == codeRefused {
		for _, ce := range refusedCauses {
			if ce.code == w.Cause {
				return &remoteError{[]error{ErrRefused, ce.err}, w.Msg}
			}
		}
	}
	for _, ce := range codeErrors {
		if ce.code == w.Code {
			return &remoteError{[]error{ce.err}, w.Msg}
		}
	}
	return &remoteError{nil, w.Msg}
}

type request struct {
	Seq      uint64      `json:"seq"` // echoed by the response
	Op       op          `json:"op"`
	Cluster  string      `json:"cluster,omitempty"` // the sender's cluster
	Node     string      `json:"node,omitempty"`
	RaftAddr string      `json:"raft,omitempty"`
	RESPAddr string      `json:"resp,omitempty"`
	Tag      string      `json:"tag,omitempty"`
	Value    int64       `json:"value,omitempty"`
	Cond     string      `json:"cond,omitempty"` // SET: "", NX or XX
	Worker   int64       `json:"worker,omitempty"`
	Index    uint64      `json:"index,omitempty"`
	Boot     uint64      `json:"boot,omitempty"` // the sender's process (allocations)
	Items    []allocItem `json:"items,omitempty"`
	// View is the leader's health of every member (stats requests).
	View []MemberHealth `json:"view,omitempty"`
	// Incarnation is the sender's start count, in lease renewals (incarnation.go).
	Incarnation uint64 `json:"incarnation,omitempty"`
	// Tags are the tags of an MSET's fence, Floors its pairs.
	Tags   []string `json:"tags,omitempty"`
	Floors []floor  `json:"floors,omitempty"`
}

type response struct {
	Seq uint64 `json:"seq"`
	Op  op     `json:"op"`
	wireError
	Identity *Identity    `json:"identity,omitempty"`
	Results  []wireResult `json:"results,omitempty"`
	Join     *JoinResult  `json:"join,omitempty"` // joins, and fresh worker IDs
	Value    int64        `json:"value,omitempty"`
	Old      int64        `json:"old,omitempty"`
	Found    bool         `json:"found,omitempty"`
	Boot     uint64       `json:"boot,omitempty"` // the answering process (fences)
	Stats    *memberStats `json:"stats,omitempty"`
	Lease    *LeaseGrant  `json:"lease,omitempty"`
}

type wireResult struct {
	First int64 `json:"first"`
	Last  int64 `json:"last"`
	wireError
}

// Identity is what a node says of itself when another asks (the join check).
type Identity struct {
	Node      string `json:"node"`
	Cluster   string `json:"cluster"` // "" when it belongs to none
	Layout    string `json:"layout"`
	HasWorker bool   `json:"has_worker"` // its directory holds a worker ID
	RESPAddr  string `json:"resp"`       // its advertised RESP address
	// PublicKey is the fingerprint of its --public-key, "" without one.
	PublicKey string `json:"public_key,omitempty"`
	Zone      string `json:"zone,omitempty"`
	Boot      uint64 `json:"boot,omitempty"` // its process: a join retried by the same process is answered again
	// Reads is the newest log shape its build reads (logShapes); older
	// builds send none.
	Reads int `json:"reads,omitempty"`
}

// logShapes is the newest shape of the log and the state this build reads:
// 1 for MSET's floors (entryFloors), the bound on tags (entryMaxTags) and
// the compact tag records, allocation entries and snapshots of
// tagFormatCompact. A cluster whose
// state uses any of them admits no node that says less (fsm.shapesNeeded):
// such a node would stop at the first entry or snapshot it cannot read,
// its worker ID taken and the cluster a member short.
const logShapes = 1

// JoinResult is what a member gets when it is admitted: its worker ID, the
// ID time its generator must start above (the previous holder's last
// lease), and its first lease end.
type JoinResult struct {
	Worker       int64 `json:"worker"`
	StartAboveMS int64 `json:"start_above_ms"`
	LeaseEndMS   int64 `json:"lease_end_ms"`
}

const maxFrame = 16 << 20

func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serveRPC answers node-to-node requests on one stream until it closes.
func (c *Cluster) serveRPC(conn net.Conn) {
	for {
		conn.SetReadDeadline(time.Now().Add(10 * time.Minute))
		var req request
		if err := readFrame(conn, &req); err != nil {
			return
		}
		resp := c.answer(&req)
		resp.Seq, resp.Op = req.Seq, req.Op
		conn.SetWriteDeadline(time.Now().Add(c.timing.Call))
		if err := writeFrame(conn, resp); err != nil {
			return
		}
	}
}

// answer runs one request, on a stream whose dialer proved it knows the
// cluster secret. Every request but identify, admit and a joiner's join
// must come from this node's cluster.
func (c *Cluster) answer(req *request) *response {
	fail := func(err error) *response {
		if err == nil {
			return &response{}
		}
		return &response{wireError: wireErrorOf(err)}
	}
	if req.Op != opIdentify && req.Op != opAdmit && c.ClusterID() == "" {
		// A node that belongs to no cluster yet, at the address of one that
		// did (a replacement at a dead leader's address): the sender tries
		// elsewhere, as with any node that does not lead.
		return fail(noLeader(ErrNotLeader, "node %s at this address belongs to no cluster yet", c.cfg.NodeID))
	}
	if req.Op != opIdentify && req.Op != opAdmit && req.Op != opJoinVia && req.Cluster != c.ClusterID() {
		return fail(fmt.Errorf("%w: a request from cluster %q reached node %s of cluster %q", ErrRefused, req.Cluster, c.cfg.NodeID, c.ClusterID()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.Call)
	defer cancel()
	switch req.Op {
	case opIdentify:
		id, err := c.identity()
		if err != nil {
			return fail(err)
		}
		return &response{Identity: &id}
	case opAdmit:
		return fail(c.admit(req.Cluster))
	case opForgotten:
		if req.Node != c.cfg.NodeID {
			// Its address is someone else's now (a replacement): the
			// leader must not take this answer for the removed node's.
			return fail(fmt.Errorf("%w: this is node %s, not %s", ErrNotMember, c.cfg.NodeID, req.Node))
		}
		if c.cfg.OnForgotten != nil {
			c.cfg.OnForgotten()
		}
		return &response{}
	case opStats:
		return c.answerStats(req)
	case opFence:
		return c.fenceLocal(req.Tag)
	case opIssued:
		return c.issuedLocal(req.Tag)
	case opFenceTags:
		return c.fenceTagsLocal(req.Tags)
	case opJoinVia:
		// A join may take a client request's budget (one that first
		// removes a dead member at the joiner's address), as CLUSTER JOIN.
		jctx, jcancel := context.WithTimeout(context.Background(), c.timing.Request)
		defer jcancel()
		var jr JoinResult
		var err error
		jr.Worker, jr.StartAboveMS, jr.LeaseEndMS, err = c.Join(jctx, req.Node, req.RaftAddr, req.RESPAddr)
		if err != nil {
			return fail(err)
		}
		return &response{Join: &jr}
	case opApplied:
		if err := c.fsm.waitPublished(ctx, req.Index); err != nil {
			return fail(fmt.Errorf("node %s has not applied index %d: %v", c.cfg.NodeID, req.Index, err))
		}
		return &response{}
	}
	if !c.IsLeader() {
		return fail(noLeader(ErrNotLeader, "node %s does not lead", c.cfg.NodeID))
	}
	switch req.Op {
	case opJoin:
		jr, err := c.join(ctx, req.Node, req.RaftAddr, req.RESPAddr)
		if err != nil {
			return fail(err)
		}
		return &response{Join: &jr}
	case opForget:
		return fail(c.forget(req.Node))
	case opAlloc:
		if err := c.caughtUp(); err != nil { // the member table, as in join
			return fail(err)
		}
		if _, ok := c.fsm.member(req.Node); !ok {
			// A forgotten node gets no more values: SET confirms only with
			// members.
			return fail(fmt.Errorf("%w: node %q is not a member of the cluster (forgotten?)", ErrNotMember, req.Node))
		}
		for i := range req.Items {
			req.Items[i].Node, req.Items[i].Boot = req.Node, req.Boot
		}
		results, err := c.allocLocal(ctx, req.Items)
		if err != nil {
			return fail(err)
		}
		out := make([]wireResult, len(results))
		for i, r := range results {
			out[i] = wireResult{First: r.First, Last: r.Last, wireError: wireErrorOf(r.Err)}
		}
		return &response{Results: out}
	case opSet:
		old, existed, err := c.setLocal(ctx, req.Tag, req.Value, req.Cond)
		resp := fail(err)
		resp.Old, resp.Found = old, existed
		return resp
	case opLease:
		g, err := c.leaseLocal(req.Node, req.Worker, req.Value, req.Incarnation)
		if err != nil {
			return fail(err)
		}
		return &response{Value: g.EndMS, Lease: &g}
	case opFresh:
		return c.answerFresh(req)
	case opFloors:
		return fail(c.floorsLocal(ctx, req.Floors))
	case opHigh:
		v, ok, err := c.High(ctx, req.Tag)
		if err != nil {
			return fail(err)
		}
		return &response{Value: v, Found: ok}
	}
	return fail(fmt.Errorf("unknown node-to-node request %d", req.Op))
}

// call sends one request to the node whose Raft address is addr, on one of
// the streams it holds to addr (streams.go). A pooled stream that turns
// out dead (its peer restarted, a partition closed it) is dropped, with
// the rest of that address's idle streams, and the request is sent once
// more on a new stream: a request answered but whose answer was lost
// costs a gap (an allocation is made again), never a repeat. The request
// ends at ctx's deadline (or the call budget), or when ctx is cancelled.
func (c *Cluster) call(ctx context.Context, addr string, req *request) (*response, error) {
	req.Cluster = c.ClusterID()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.timing.Call)
	}
	for {
		req.Seq = c.seq.Add(1)
		conn, pooled, err := c.takeConn(ctx, addr, deadline)
		if err != nil {
			return nil, fmt.Errorf("node at %s: %w", addr, err)
		}
		conn.SetDeadline(deadline)
		cancelled := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
		var resp response
		err = writeFrame(conn, req)
		if err == nil {
			err = readFrame(conn, &resp)
		}
		if err == nil && (resp.Seq != req.Seq || resp.Op != req.Op) {
			err = fmt.Errorf("answer %d (op %d) to request %d (op %d)", resp.Seq, resp.Op, req.Seq, req.Op)
			c.log.Error("a node-to-node stream answered another request; dropping it", "addr", addr, "err", err)
		}
		if err != nil {
			cancelled()
			c.releaseConn(addr, conn, false)
			if pooled && ctx.Err() == nil && time.Now().Before(deadline) {
				c.dropIdle(addr)
				continue
			}
			return nil, fmt.Errorf("node at %s: %w", addr, err)
		}
		// A stream whose deadline ctx's end may have moved goes no further.
		keep := cancelled()
		conn.SetDeadline(time.Time{})
		c.releaseConn(addr, conn, keep)
		return &resp, resp.err()
	}
}

// toLeader sends a request to the leader's Raft address. With no leader
// in sight (this node was cut off, or removed from the configuration and
// no longer hears from it), it asks the other members it knows, so that a
// leader among them answers, even if only to say this node is no longer a
// member. No leader anywhere is ErrNoLeader.
func (c *Cluster) toLeader(ctx context.Context, req *request) (*response, error) {
	addrs := []string{}
	if addr, _ := c.raft.LeaderWithID(); addr != "" {
		addrs = append(addrs, string(addr))
	} else {
		for _, m := range c.fsm.memberList() {
			if m.NodeID != c.cfg.NodeID {
				addrs = append(addrs, m.RaftAddr)
			}
		}
	}
	err := noLeader(ErrLeaderUnknown, "no leader known")
	for _, addr := range addrs {
		var resp *response
		resp, err = c.call(ctx, addr, req)
		var re *remoteError
		switch {
		case err == nil:
			return resp, nil
		case errors.As(err, &re) && !errors.Is(err, ErrNoLeader):
			return resp, err
		case !errors.As(err, &re):
			err = noLeader(ErrLeaderUnknown, "%v", err)
		}
	}
	return nil, err
}
