package resp

import (
	"context"
	"fmt"

	"github.com/tidwall/redcon"
)

// msetCommands set the floors of many tags at once.
func msetCommands() []*command {
	return []*command{
		{name: "mset", arity: -3, keys: [3]int{1, -1, 2}, flags: []string{"write"}, summary: "Raise many tags at once: every later value of each tag is above its value (a tag already at or above it is left as it is)", handler: cmdMSet},
	}
}

// cmdMSet: MSET tag value [tag value ...], OK once every floor is applied
// on every member. Every pair is checked before anything is sent: one bad
// tag or value refuses the whole call, naming it.
func cmdMSet(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	if len(args)%2 != 1 {
		s.errorReply(conn, wrongArity("mset"))
		return
	}
	if !s.needCluster(conn) {
		return
	}
	tags := make([]string, 0, len(args)/2)
	values := make([]int64, 0, len(args)/2)
	for i := 1; i < len(args); i += 2 {
		if !s.validTag(conn, args[i]) {
			return
		}
		v, ok := parseInt64(args[i+1])
		if !ok || v < 0 {
			s.errorReply(conn, fmt.Sprintf("%s: tag %q: %q (a value is 0 to 9223372036854775807; nothing was set)", errNotInteger, args[i], args[i+1]))
			return
		}
		tags, values = append(tags, string(args[i])), append(values, v)
	}
	// Each entry of the MSET has the cluster's request timeout to itself
	// (cluster.MSet), so a long MSET is bounded by its length.
	if err := s.cfg.Cluster.MSet(context.Background(), tags, values); err != nil {
		s.clusterError(conn, err)
		return
	}
	conn.WriteString("OK")
}
