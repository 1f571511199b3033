package resp

import (
	"slices"
	"strings"

	"github.com/tidwall/redcon"
)

// Pub/sub, limited to Sentinel's event channels. A Sentinel client
// subscribes to a sentinel's events (go-redis: +switch-master and
// +replica-reconf-done; ioredis with failoverDetector: +switch-master) to
// learn of a failover. Every node is a sentinel that never announces one
// (sentinel.go), so nothing is ever published: a subscription only has to
// be confirmed, kept and dropped as Redis does, with Redis's replies in
// RESP2 and RESP3 (push) shapes. Channels are Sentinel's event names, which
// begin with '+' or '-'; patterns are those that can match one. In RESP2 a
// subscribed connection takes only (P)SUBSCRIBE, (P)UNSUBSCRIBE, PING
// (answered ["pong", arg]), QUIT and RESET, as in Redis.

// subscriptions are a connection's channels and patterns.
type subscriptions struct {
	channels, patterns []string
}

func (p *subscriptions) count() int { return len(p.channels) + len(p.patterns) }

// pubsubCommands are SUBSCRIBE, PSUBSCRIBE and their undoing.
func pubsubCommands() []*command {
	return []*command{
		{name: "subscribe", arity: -2, flags: []string{"pubsub"}, summary: "Subscribe to Sentinel's event channels (+switch-master, ...): none is ever published", handler: cmdSubscribe},
		{name: "psubscribe", arity: -2, flags: []string{"pubsub"}, summary: "Subscribe to patterns of Sentinel's event channels", handler: cmdSubscribe},
		{name: "unsubscribe", arity: -1, flags: []string{"pubsub"}, summary: "Drop channel subscriptions", handler: cmdUnsubscribe},
		{name: "punsubscribe", arity: -1, flags: []string{"pubsub"}, summary: "Drop pattern subscriptions", handler: cmdUnsubscribe},
	}
}

// allowedSubscribed are the commands a RESP2 connection with a subscription
// may send.
var allowedSubscribed = map[string]bool{"subscribe": true, "psubscribe": true, "unsubscribe": true, "punsubscribe": true,
	"ping": true, "quit": true, "reset": true}

// errSubscribedContext is Redis's refusal of any other command.
func errSubscribedContext(name string) string {
	return "ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
}

// sentinelChannel reports whether name can be (or, as a pattern, match)
// one of Sentinel's event channels. A pattern may escape its leading + or
// - as Redis's glob allows ("\\+*").
func sentinelChannel(name []byte, pattern bool) bool {
	if len(name) == 0 {
		return false
	}
	if pattern && name[0] == '\\' {
		return len(name) > 1 && (name[1] == '+' || name[1] == '-')
	}
	switch name[0] {
	case '+', '-':
		return true
	case '*', '?', '[':
		return pattern
	}
	return false
}

func cmdSubscribe(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	pattern := len(args[0]) > 0 && (args[0][0] == 'p' || args[0][0] == 'P')
	for _, name := range args[1:] {
		if !sentinelChannel(name, pattern) {
			s.errorReply(conn, "ERR idserver publishes no messages: "+strings.ToUpper(string(args[0]))+
				" takes only Sentinel's event channels (+switch-master, +replica-reconf-done, ...: names beginning with + or -)")
			return
		}
	}
	kind, list := "subscribe", &c.pubsub.channels
	if pattern {
		kind, list = "psubscribe", &c.pubsub.patterns
	}
	for _, name := range args[1:] {
		if !slices.Contains(*list, string(name)) {
			*list = append(*list, string(name))
		}
		writePush(conn, c, kind, name, c.pubsub.count())
	}
}

func cmdUnsubscribe(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	pattern := len(args[0]) > 0 && (args[0][0] == 'p' || args[0][0] == 'P')
	kind, list := "unsubscribe", &c.pubsub.channels
	if pattern {
		kind, list = "punsubscribe", &c.pubsub.patterns
	}
	names := args[1:]
	if len(names) == 0 {
		if len(*list) == 0 {
			writePush(conn, c, kind, nil, c.pubsub.count())
			return
		}
		for _, n := range *list {
			names = append(names, []byte(n))
		}
	}
	for _, name := range names {
		if i := slices.Index(*list, string(name)); i >= 0 {
			*list = slices.Delete(*list, i, i+1)
		}
		writePush(conn, c, kind, name, c.pubsub.count())
	}
}

// writePush writes a subscription's confirmation: [kind, name, count], a
// push in RESP3; a nil name is a null.
func writePush(conn redcon.Conn, c *client, kind string, name []byte, count int) {
	if c.proto == 3 {
		conn.WriteRaw([]byte(">3\r\n"))
	} else {
		conn.WriteArray(3)
	}
	conn.WriteBulkString(kind)
	if name == nil {
		writeNull(conn, c)
	} else {
		conn.WriteBulk(name)
	}
	conn.WriteInt(count)
}
