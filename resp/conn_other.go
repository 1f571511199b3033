//go:build !linux || norawloop

package resp

import (
	"net"
	"syscall"
)

// Elsewhere than Linux every connection is served with net.Conn.Read.

func rawConnOf(net.Conn) syscall.RawConn { return nil }

type rawReader struct{}

func (l *loop) rawLoop() {}

func rawWrite(int, []byte) (int, error) { return 0, nil }
