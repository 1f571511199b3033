package resp

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// The raw loop: reads and writes as raw system calls, one read per
// readiness edge.
//
// The serve loop runs inside one syscall.RawConn.Read, whose callback reads
// the socket itself with read(2) as a raw system call and returns to the
// runtime's poller to wait for the next readiness edge after a read that did
// not fill its buffer (the socket is drained: bytes that come later make a
// new edge). A read through the scheduler (net.Conn.Read, syscall.Read)
// wakes the runtime's sysmon thread whenever the process was idle: a thread
// switch on each side, on a server's one CPU, most of what a Go server costs
// per round trip beyond Redis's. And net.Conn.Read reads until EAGAIN: at
// pipeline 1, one read in two finds nothing, a system call per request
// Redis does not make.
//
// What no edge follows is the end of the stream when the client's FIN comes
// in the same edge as its last bytes: the read takes the bytes, the FIN is
// left, and the poller says nothing more. The server's endWatch sees it
// (below): its own epoll instance, in which every raw-loop socket is
// registered for EPOLLRDHUP alone, once, reports the FIN, and the watch
// shuts the socket's read side (shutdown(2), SHUT_RD), which wakes the loop:
// it reads what is left, then the end. Without the watch (its epoll could
// not be made) the loop reads until EAGAIN after every read.
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

// rawLoop serves the connection until it ends, its stream's end watched
// by ends (under id) if ends is not nil.
func (l *loop) rawLoop(ends *endWatch, id int64) {
	cn := l.cn
	first, watched := true, false
	defer ends.remove(id)
	cn.rc.Read(func(fd uintptr) bool {
		if first {
			first = false
			// Registered here, after the poller's wait was prepared (which
			// forgets an edge that came before it): the watch's wake-up
			// for an end that is already there reaches the wait below.
			watched = ends.add(id, cn, int(fd))
		}
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
			if watched && n < len(room) && !cn.ended.Load() {
				// Drained: what comes next makes a new edge, and an
				// end of stream that came with these bytes, the watch
				// reports (after this check, or it would be set).
				return false
			}
		}
		return true
	}) // an error from the poller (the socket closed) ends the connection too
	cn.held = false
}

// endWatch reports the end of a raw-loop connection's stream (the client's
// FIN, or a reset) that no readiness edge of the runtime's poller follows:
// one epoll instance of the server's, on the runtime's poller itself, in
// which each socket is registered for EPOLLRDHUP (and the EPOLLHUP and
// EPOLLERR epoll always reports), once (EPOLLONESHOT). A socket's data
// wakes nobody here; its end wakes the watch, which shuts the socket's read
// side: that wakes the connection's loop, which reads what is left and
// then the end. The kernel drops a socket's registration when it closes.
//
// The wake-up alone would not do: the end and the wake-up can both fold
// into the edge of bytes the loop has not read yet, so that the read the
// edge wakes takes the bytes and no edge follows. The watch sets the
// connection's ended first, and a loop that sees it after a short read
// reads on (read(2) then returns what is left and 0, never EAGAIN); one
// that does not see it waits, and the wake-up comes after that.
type endWatch struct {
	epfd  int
	file  *os.File // epfd, on the runtime's poller
	mu    sync.Mutex
	conns map[int64]*connection // by client ID, which an event carries
}

// newEndWatch starts a watch, or returns nil if it cannot (then every
// raw loop reads until EAGAIN).
func newEndWatch() *endWatch {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil
	}
	w := &endWatch{epfd: epfd, file: os.NewFile(uintptr(epfd), "endwatch"), conns: map[int64]*connection{}}
	rc, err := w.file.SyscallConn()
	if err != nil {
		w.file.Close()
		return nil
	}
	go w.run(rc)
	return w
}

// add watches cn's socket fd under id; it reports whether it is watched.
func (w *endWatch) add(id int64, cn *connection, fd int) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	w.conns[id] = cn
	w.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(id), Pad: int32(id >> 32)}
	if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) != nil {
		w.remove(id)
		return false
	}
	return true
}

// remove forgets id (its socket is closing).
func (w *endWatch) remove(id int64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.conns, id)
	w.mu.Unlock()
}

// run waits on the runtime's poller for the watch's events until close.
func (w *endWatch) run(rc syscall.RawConn) {
	events := make([]syscall.EpollEvent, 64)
	rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.EpollWait(int(fd), events, 0)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || n <= 0 {
				return err != nil && err != syscall.EAGAIN
			}
			for _, ev := range events[:n] {
				id := int64(uint32(ev.Fd)) | int64(ev.Pad)<<32
				w.mu.Lock()
				cn := w.conns[id]
				w.mu.Unlock()
				if cn != nil {
					// Its wake-up may fold into an edge the loop has
					// not read yet, so the loop is told first: it
					// reads on to the end after a short read.
					cn.ended.Store(true)
					cn.rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RD) })
				}
			}
		}
	})
}

// close stops the watch.
func (w *endWatch) close() {
	if w != nil {
		w.file.Close()
	}
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
