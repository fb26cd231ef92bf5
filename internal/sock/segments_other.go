//go:build !(linux && (amd64 || arm64))

package sock

import "net"

// SegmentCounter would read the kernel's count of data segments received;
// here there is none.
type SegmentCounter struct{}

// SegmentsIn reports no count here (false).
func (*SegmentCounter) SegmentsIn(net.Conn) (uint32, bool) { return 0, false }
