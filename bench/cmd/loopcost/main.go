// Command loopcost measures what the serve loop's I/O structure costs per
// request, apart from parsing and commands: it answers every RESP frame
// with an integer reply, counting frames by their '*' headers, either
// with one goroutine per connection on Go's net package (idserver's
// loop today: read, EAGAIN, park, wake, read) or with one thread on an
// epoll event loop of its own (golang.org/x/sys/unix; Redis's shape: one
// read per readable event). Run one of each under redis-benchmark and
// compare the processes' CPU per request (bench/RESULTS.md, "An event loop of our own, measured"):
//
//	loopcost -mode net -port 7001 & loopcost -mode epoll -port 7002 &
//	redis-benchmark -p 7001 -c 50 -P 1 -n 200000 INCR c
//
// It only measures; it is not a server (frames are assumed to be whole
// commands as redis-benchmark sends them, each ending in a reply).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	mode := flag.String("mode", "net", "net (goroutine per connection), raw (the same, one read per readiness event) or epoll (one event loop)")
	port := flag.Int("port", 0, "TCP port on 127.0.0.1")
	flag.Parse()
	var err error
	switch *mode {
	case "net":
		err = serveNet(*port)
	case "raw":
		err = serveRaw(*port)
	case "epoll":
		err = serveEpoll(*port)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loopcost:", err)
		os.Exit(1)
	}
}

// frames counts the requests in a buffer of whole commands: lines that
// begin with '*' (an array header; bulk strings begin with '$').
func frames(b []byte) int {
	n := 0
	if len(b) > 0 && b[0] == '*' {
		n++
	}
	n += bytes.Count(b, []byte("\n*"))
	return n
}

// reply appends n integer replies.
func reply(dst []byte, n int, counter *int64) []byte {
	for range n {
		*counter++
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, *counter, 10)
		dst = append(dst, '\r', '\n')
	}
	return dst
}

func serveNet(port int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			in := make([]byte, 16<<10)
			out := make([]byte, 0, 16<<10)
			var ctr int64
			for {
				n, err := c.Read(in)
				if err != nil {
					return
				}
				out = reply(out[:0], frames(in[:n]), &ctr)
				if _, err := c.Write(out); err != nil {
					return
				}
			}
		}()
	}
}

// serveRaw is serveNet with one read per readiness event, idserver's raw
// loop (resp/conn_linux.go): the loop runs inside one syscall.RawConn.Read,
// whose callback reads the socket itself and, after a read shorter than the
// buffer (the socket is drained), waits on Go's netpoller for the next edge
// instead of reading again to find EAGAIN. An edge that comes while the
// callback works is kept by the poller, so the wait then returns at once.
// Reads and writes are raw system calls (the socket never blocks), which do
// not wake the runtime's sysmon thread.
func serveRaw(port int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			in := make([]byte, 16<<10)
			out := make([]byte, 0, 16<<10)
			var ctr int64
			rc.Read(func(fd uintptr) bool {
				for {
					n, err := rawSys(unix.SYS_READ, int(fd), in)
					if err == unix.EAGAIN {
						return false
					}
					if n <= 0 {
						return true
					}
					out = reply(out[:0], frames(in[:n]), &ctr)
					for len(out) > 0 {
						w, err := rawSys(unix.SYS_WRITE, int(fd), out)
						if err != nil && err != unix.EAGAIN {
							return true
						}
						if w > 0 {
							out = out[w:]
						}
					}
					if n < len(in) {
						return false // drained: wait for the next edge
					}
				}
			})
		}()
	}
}

// epollPoll is epoll_wait(2) with a timeout of 0, without telling the
// scheduler.
func epollPoll(ep int, events []unix.EpollEvent) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// rawSys is read(2) or write(2) without telling the scheduler.
func rawSys(trap uintptr, fd int, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func serveEpoll(port int) error {
	runtime.LockOSThread()
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	if err := unix.Listen(lfd, 512); err != nil {
		return err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, lfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lfd)}); err != nil {
		return err
	}
	in := make([]byte, 16<<10)
	out := make([]byte, 0, 16<<10)
	counters := map[int]*int64{}
	events := make([]unix.EpollEvent, 128)
	for {
		// A poll that finds events ready is a raw system call (it cannot
		// block, so the scheduler need not know, and sysmon is not woken);
		// only an empty one is followed by the wait through the scheduler.
		n, err := epollPoll(ep, events)
		if err == nil && n == 0 {
			n, err = unix.EpollWait(ep, events, -1)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				for {
					cfd, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
					if err != nil {
						break
					}
					_ = unix.SetsockoptInt(cfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
					_ = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, cfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(cfd)})
					counters[cfd] = new(int64)
				}
				continue
			}
			// One read per readable event, as Redis does; a short
			// read leaves the rest for the next event.
			r, err := rawSys(unix.SYS_READ, fd, in)
			if r <= 0 {
				if err == unix.EAGAIN {
					continue
				}
				_ = unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, fd, nil)
				_ = unix.Close(fd)
				delete(counters, fd)
				continue
			}
			out = reply(out[:0], frames(in[:r]), counters[fd])
			for len(out) > 0 {
				w, err := rawSys(unix.SYS_WRITE, fd, out)
				if err != nil && err != unix.EAGAIN {
					break
				}
				if w > 0 {
					out = out[w:]
				}
			}
		}
	}
}
