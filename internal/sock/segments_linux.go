//go:build linux && (amd64 || arm64)

package sock

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SegmentCounter reads the kernel's count of data segments received on a
// TCP socket (tcpi_data_segs_in, Linux 4.6 and later). It allocates once,
// on its first use on a connection.
type SegmentCounter struct {
	raw    syscall.RawConn
	read   func(fd uintptr) // getsockopt bound to this counter
	failed bool             // the socket has no count (not TCP, an older kernel)
	info   unix.TCPInfo
	size   uint32
	errno  syscall.Errno
}

// dataSegsInEnd is how much of tcp_info the kernel must fill for the count.
const dataSegsInEnd = uint32(unsafe.Offsetof(unix.TCPInfo{}.Data_segs_in) + unsafe.Sizeof(unix.TCPInfo{}.Data_segs_in))

// SegmentsIn returns the data segments conn has received so far.
func (k *SegmentCounter) SegmentsIn(conn net.Conn) (uint32, bool) {
	if k.failed {
		return 0, false
	}
	if k.raw == nil {
		sc, ok := conn.(syscall.Conn)
		if !ok {
			k.failed = true
			return 0, false
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			k.failed = true
			return 0, false
		}
		k.raw, k.read = raw, k.getsockopt
	}
	if err := k.raw.Control(k.read); err != nil {
		return 0, false // closed meanwhile
	}
	if k.errno != 0 || k.size < dataSegsInEnd {
		k.failed = true
		return 0, false
	}
	return k.info.Data_segs_in, true
}

// getsockopt fills k.info; unix.GetsockoptTCPInfo would allocate a new one.
// The call never blocks, so it is made raw (see Conn).
func (k *SegmentCounter) getsockopt(fd uintptr) {
	k.size = uint32(unsafe.Sizeof(k.info))
	_, _, k.errno = unix.RawSyscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&k.info)), uintptr(unsafe.Pointer(&k.size)), 0)
}
