package resp

import (
	"sync"
	"unsafe"
)

// A connection holds a read buffer and a reply buffer only while it has
// bytes in them: between requests both go back to bufPools, so an idle
// connection holds neither, and a closed one leaves nothing behind that a
// GC does not take. The pools are by size class, powers of two from
// minPooled to maxPooled; a buffer past maxPooled is made and dropped.
const (
	minPooledShift = 12 // 4 KiB
	maxPooledShift = 17 // 128 KiB
	minPooled      = 1 << minPooledShift
	maxPooled      = 1 << maxPooledShift
)

// bufPools holds, by class, the address of each free buffer's first byte:
// a pointer, which a sync.Pool keeps without an allocation of its own.
var bufPools [maxPooledShift - minPooledShift + 1]sync.Pool

// classOf is the smallest class that holds size bytes (ceil), or -1 past
// maxPooled.
func classOf(size int) int {
	c := 0
	for minPooled<<c < size {
		c++
		if c == len(bufPools) {
			return -1
		}
	}
	return c
}

// getBuf returns a buffer of at least size bytes, its length its capacity:
// a free one of its class when there is one.
func getBuf(size int) []byte {
	c := classOf(size)
	if c < 0 {
		return make([]byte, size)
	}
	if p, ok := bufPools[c].Get().(unsafe.Pointer); ok {
		return unsafe.Slice((*byte)(p), minPooled<<c)
	}
	return make([]byte, minPooled<<c)
}

// putBuf gives b back, in the largest class its capacity holds; one under
// minPooled or past maxPooled is left to the GC. The caller uses b no more.
func putBuf(b []byte) {
	n := cap(b)
	if n < minPooled || n > maxPooled {
		return
	}
	c := len(bufPools) - 1
	for minPooled<<c > n {
		c--
	}
	bufPools[c].Put(unsafe.Pointer(unsafe.SliceData(b[:1])))
}
