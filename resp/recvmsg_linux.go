//go:build linux && !386 && !norawloop

package resp

import "syscall"

// sysRecvmsg is recvmsg(2)'s number, 0 where the syscall package has none.
const sysRecvmsg = syscall.SYS_RECVMSG
