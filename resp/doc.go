// Package resp is idserver's wire: a frame guard in front of redcon's
// reader, a command table with Redis-style arity checks, and the replies,
// in RESP2 or (after HELLO 3) RESP3.
//
// It knows nothing of Raft or Pebble: it consumes the small IDSource
// interface, which the engine implements.
package resp
