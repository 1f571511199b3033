//go:build linux && 386 && !norawloop

package resp

// sysRecvmsg is 0: on 386 the syscall package reaches recvmsg through
// socketcall, so the raw loop reads until EAGAIN there.
const sysRecvmsg = 0
