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
// the socket itself as a raw system call, then returns to the runtime's
// poller to wait for the next readiness edge. A read through the scheduler
// (net.Conn.Read, syscall.Read) wakes the runtime's sysmon thread whenever
// the process was idle: a thread switch on each side, on a server's one
// CPU, most of what a Go server costs per round trip beyond Redis's.
//
// One read per readiness edge: the socket has TCP_INQ set, so each
// recvmsg(2) also says how many bytes the socket still holds, and counts
// the client's FIN as one when it has come (the kernel's tcp_inq_hint).
// After a read that leaves nothing and no end behind, the loop answers and
// waits for the next edge (the poller keeps one that comes meanwhile)
// rather than read again to find EAGAIN; after one that leaves something,
// it reads again. A read that did not fill the buffer does not by itself
// say the stream has not ended: the client's FIN can come in the same edge
// as its last bytes, and no edge follows it. Where TCP_INQ cannot be set,
// the loop reads until EAGAIN.
//
// Everything else is serveConn's: the same parse, the same commands on the
// connection's own goroutine (one that waits, an INCR for a refill, waits
// there, and the connection's replies keep their order), the same bounded
// writes (a write the socket does not take whole waits under the client
// output timeout, through net.Conn.Write). While the callback runs it holds
// the descriptor, so QUIT's Close leaves closing to serveConn, and
// Server.Close shuts the socket down (kill) rather than close it.

// tcpInq is Linux's TCP_INQ socket option, and TCP_CM_INQ, the type of
// the control message recvmsg then returns.
const tcpInq = 36

// rawReader reads a socket with recvmsg(2) and its TCP_INQ count. Its
// message header and control buffer are the connection's, made once.
type rawReader struct {
	inq bool // TCP_INQ is set: read says whether the socket holds more
	iov syscall.Iovec
	msg syscall.Msghdr
	ctl [3]uint64 // one cmsghdr and its int, aligned
}

// setup sets TCP_INQ on fd.
func (r *rawReader) setup(fd int) {
	r.inq = sysRecvmsg != 0 && syscall.SetsockoptInt(fd, syscall.SOL_TCP, tcpInq, 1) == nil
}

// read reads what the socket holds into b (not empty), without waiting.
// more says the socket may hold more, or its end: read again before
// waiting for the next edge.
func (r *rawReader) read(fd int, b []byte) (n int, more bool, err error) {
	if !r.inq {
		n, err = rawRead(fd, b)
		return n, true, err
	}
	r.iov.Base = &b[0]
	r.iov.SetLen(len(b))
	r.msg.Iov = &r.iov
	r.msg.Iovlen = 1
	r.msg.Control = (*byte)(unsafe.Pointer(&r.ctl[0]))
	r.msg.SetControllen(int(unsafe.Sizeof(r.ctl)))
	r.msg.Flags = 0
	got, _, errno := syscall.RawSyscall(sysRecvmsg, uintptr(fd), uintptr(unsafe.Pointer(&r.msg)), 0)
	r.iov.Base = nil // the buffer goes back to bufPools: nothing here keeps it
	if errno != 0 {
		return -1, true, errno
	}
	more = true
	if uint64(r.msg.Controllen) >= uint64(syscall.CmsgLen(4)) {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&r.ctl[0]))
		if h.Level == syscall.SOL_TCP && h.Type == tcpInq {
			more = *(*int32)(unsafe.Add(unsafe.Pointer(&r.ctl[0]), syscall.CmsgLen(0))) > 0
		}
	}
	return int(got), more, nil
}

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
	cn.rc.Control(func(fd uintptr) { l.rd.setup(int(fd)) })
	cn.rc.Read(func(fd uintptr) bool {
		cn.fd, cn.held = int(fd), true
		for !cn.killed.Load() {
			n, more, err := l.rd.read(int(fd), l.room())
			l.s.stats.reads.Add(1)
			switch {
			case err == syscall.EAGAIN:
				l.idle()
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
			if !more {
				return false // nothing more and no end: wait for the next edge
			}
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
