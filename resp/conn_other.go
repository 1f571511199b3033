//go:build !linux

package resp

import (
	"net"
	"syscall"
)

// Elsewhere than Linux every connection is served with net.Conn.Read.

func rawConnOf(net.Conn) syscall.RawConn { return nil }

func (l *loop) rawLoop(*endWatch, int64) {}

type endWatch struct{}

func newEndWatch() *endWatch                       { return nil }
func (*endWatch) add(int64, *connection, int) bool { return false }
func (*endWatch) remove(int64)                     {}
func (*endWatch) close()                           {}

func rawWrite(int, []byte) (int, error) { return 0, nil }
