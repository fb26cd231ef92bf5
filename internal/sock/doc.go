// Package sock is the proxy's Linux socket I/O: raw reads and writes of a
// TCP socket under Go's poller, the pump that relays a stream inside one
// wait, the disconnect watcher, the kernel's segment count, and the
// listener. It is the only package that makes system calls of its own
// (archtest holds every other package to that).
//
// The contract:
//
//   - A Conn (New) reads and writes one TCP socket with raw non-blocking
//     system calls made inside its syscall.RawConn, so the poller still
//     waits for readiness and the connection's deadlines and Close still
//     apply, but no read or write enters the scheduler's system-call state
//     (which wakes the runtime's monitor thread after an idle moment: on
//     one core, several context switches per event). Its errors are
//     net.Conn's: io.EOF at the peer's end, a *net.OpError otherwise. One
//     goroutine at a time reads, and one writes. Read, Write, WriteVec (one
//     writev for up to MaxWriteVec buffers) and ReadStamped (how long the
//     bytes waited in the socket, after StampReceives) allocate nothing.
//
//   - Pump runs a step inside one wait of the poller. Its reads then ask
//     the socket only when it may hold bytes: after a short read they
//     return ErrWouldBlock, and the step returns true to wait for more. So
//     an event costs one read, not two. A wait that fails (a deadline, a
//     close) ends the pump with its error, and the next read returns it.
//     A short read does not return the peer's end that came with the
//     bytes, so a Conn is pumped only once the Watcher reports its end
//     (Watcher.WatchEnd; Pumpable). A pump holds the connection's read
//     lock, which Close waits for: to end a pumped connection from another
//     goroutine, Shutdown it (its reads then end), and close it where it is
//     read.
//
//   - A Watcher learns that peers went away (FIN or RST) with nothing read
//     or written, through one epoll set of its own, itself waited on
//     through Go's poller. A client connection is registered once
//     (WatchConn) and pointed at each request it serves (ConnWatch.Arm).
//     An upstream connection's registration (WatchEnd) is pointed at its
//     idle time in a pool (WatchIdle): then any byte or end that arrives is
//     reported once, the connection no longer to be used, and EndIdle, the
//     way back to a request, says so. What arrives between EndIdle and the
//     request's write only a check of the socket finds (Conn.Unread: bytes,
//     the end, or empty, without reading or waiting).
//
//   - RawListener hands out accepted connections read and written through
//     a Conn (Of finds it), and Dial connects one: both with raw calls
//     (accept4; socket, setsockopt, connect) under a RawConn, waiting in
//     the poller, so that starting a connection makes no system call
//     through the scheduler's system-call state either (its close still
//     does: Go's poller closes the descriptor). Listen opens a listener
//     whose sockets inherit TCP_NODELAY and keep-alive from it; WaitReadable waits for a
//     connection's next request without reading it; SegmentCounter reads
//     the kernel's count of data segments a socket received.
//
// Elsewhere than Linux every part works without raw calls: a Conn reads
// and writes through its net.Conn (a read blocks, so a pump's step runs
// to its end; no receive timestamps), the Watcher reports nothing (nothing
// is pumped), Shutdown closes, and no segment count is known.
package sock
