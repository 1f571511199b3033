package resp

import (
	"errors"
	"time"

	"github.com/tidwall/redcon"

	"idserver/engine"
)

// uuidCommands issue RFC 9562 UUIDv7s.
func uuidCommands() []*command {
	return []*command{
		{name: "uuidv7", arity: -1, flags: []string{"write", "fast"}, summary: "Issue an RFC 9562 UUIDv7, or count of them, strictly increasing", handler: cmdUUIDv7},
	}
}

// uuidIssuer is an IDSource that issues UUIDv7s itself, strictly
// increasing across restarts (engine.Generator, under its high-water);
// other sources' UUIDs come from the server's own UUIDv7.
type uuidIssuer interface {
	UUIDv7s(dst [][16]byte, n int) ([][16]byte, error)
}

// cmdUUIDv7 answers UUIDV7 [count]: a bulk string, or an array of count.
func cmdUUIDv7(s *Server, c *client, conn redcon.Conn, args [][]byte) {
	n, ok := s.optionalCount(conn, "uuidv7", args)
	if !ok {
		return
	}
	var uuids [][16]byte
	var err error
	if ui, ok := s.ids.(uuidIssuer); ok {
		uuids, err = ui.UUIDv7s(make([][16]byte, 0, n), n)
	} else {
		uuids, err = s.uuids.Next(make([][16]byte, 0, n), n)
	}
	if errors.Is(err, engine.ErrHighWater) || errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrNoLease) {
		s.engineError(conn, err)
		return
	}
	if err != nil {
		s.errorReply(conn, "ERR cannot read random bits: "+err.Error())
		return
	}
	s.cmdStats[c.cmd].issued.Add(int64(n))
	if len(args) == 2 {
		conn.WriteArray(n)
	}
	for _, u := range uuids {
		conn.WriteBulkString(engine.FormatUUID(u))
	}
}

// decodeUUIDv7 answers DECODE of a UUIDv7 with its time; ok false when
// arg is not one.
func decodeUUIDv7(c *client, conn redcon.Conn, arg []byte) bool {
	_, ms, err := engine.ParseUUIDv7(arg)
	if err != nil {
		return false
	}
	writeMap(conn, c, 2)
	conn.WriteBulkString("time_ms")
	conn.WriteInt64(ms)
	conn.WriteBulkString("time")
	conn.WriteBulkString(time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	return true
}
