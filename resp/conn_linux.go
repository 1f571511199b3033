//go:build linux && !norawloop

package resp

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// The raw loop: reads and writes as raw system calls.
//
// The serve loop runs inside one syscall.RawConn.Read, whose callback reads
// the socket itself with read(2) as a raw system call, until EAGAIN, then
// returns to the runtime's poller to wait for the next readiness edge. A
// read through the scheduler (net.Conn.Read, syscall.Read) wakes the
// runtime's sysmon thread whenever the process was idle: a thread switch
// on each side, on a server's one CPU, most of what a Go server costs per
// round trip beyond Redis's. The read that finds nothing (EAGAIN) is kept:
// a read that did not fill the buffer does not say the stream has not
// ended, since the client's FIN can come in the same edge as its last
// bytes, and no edge follows it (a loop that waited for one after a short
// read, to save that read, left half-closed connections open).
//
// Everything else is serveConn's: the same parse, the same commands on the
// connection's own goroutine (one that waits, an INCR for a refill, waits
// there, and the connection's replies keep their order), the same bounded
// writes (a write the socket does not take whole waits under the client
// output timeout, through net.Conn.Write). While the callback runs it holds
// the descriptor, so QUIT's Close leaves closing to serveConn, and
// Server.Close shuts the socket down (kill) rather than close it.

// rawConnOf is the RawConn the raw loop reads, or nil for a connection it
// does not serve (TLS, or anything but TCP).
func rawConnOf(nc net.Conn) syscall.RawConn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// rawLoop serves the connection until it ends.
func (l *loop) rawLoop() {
	cn := l.cn
	cn.rc.Read(func(fd uintptr) bool {
		cn.fd, cn.held = int(fd), true
		for !cn.killed.Load() {
			room := l.room()
			n, err := rawRead(int(fd), room)
			switch {
			case err == syscall.EAGAIN:
				return false // nothing yet: wait for the poller
			case err == syscall.EINTR:
				continue
			case err != nil:
				n = 0
			case n == 0:
				err = io.EOF
			}
			if !l.answer(n, err) {
				return true
			}
			// Read again until EAGAIN, even after a read that did not fill
			// the buffer: the end of the stream (the client's FIN) can come
			// in the same readiness edge as the last bytes, and no edge
			// follows it; waiting for one left the connection open.
		}
		return true
	}) // an error from the poller (the socket closed) ends the connection too
	cn.held = false
}

// rawWrite writes b to fd without waiting: how much the socket took, and
// an error other than EAGAIN.
func rawWrite(fd int, b []byte) (int, error) {
	written := 0
	for written < len(b) {
		n, err := rawSys(syscall.SYS_WRITE, fd, b[written:])
		if n > 0 {
			written += n
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return written, nil
		case err != nil:
			return written, err
		case n == 0:
			return written, io.ErrUnexpectedEOF
		}
	}
	return written, nil
}

// rawRead reads what the socket holds, without waiting.
func rawRead(fd int, b []byte) (int, error) { return rawSys(syscall.SYS_READ, fd, b) }

// rawSys is read(2) or write(2) on a non-blocking socket as a raw system
// call: without telling the scheduler, which a call that cannot block does
// not need. (syscall.Read tells it, and that wakes the runtime's sysmon
// thread whenever the process was idle: a thread switch on each side, on a
// server's one CPU, most of what a Go server costs per round trip beyond
// Redis's.)
func rawSys(trap uintptr, fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(len(b)))
	if errno != 0 {
		return -1, errno
	}
	return int(n), nil
}
