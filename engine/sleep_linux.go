package engine

import (
	"syscall"
	"time"
)

// kernelSleep sleeps d in the kernel (nanosleep), which wakes within tens
// of microseconds, where Go's timers wake through the netpoller's
// epoll_wait, in whole milliseconds (Generator.wait). An early wake (EINTR) is
// made up by wait's spin.
func kernelSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
