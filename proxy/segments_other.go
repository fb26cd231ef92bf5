//go:build !(linux && (amd64 || arm64))

package proxy

import "net"

// segmentCounter would read the kernel's count of data segments received;
// here it has none, and the buffering rule counts socket reads instead.
type segmentCounter struct{}

func (segmentCounter) segmentsIn(net.Conn) (uint32, bool) { return 0, false }
