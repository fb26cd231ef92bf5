package proxy

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/internal/sock"
)

// Dialing an upstream: fasthttp's defaults (its Dial), kept.
const (
	dialTimeout   = 3 * time.Second // for all of one dial's addresses
	dialCacheTime = time.Minute     // a name's addresses are looked up again after
)

// upstreamDialer dials one upstream's host:port with sock.Dial (raw
// calls, none of which wakes the runtime's monitor thread): an IP address
// as it is; a name looked up (its IPv4 addresses, as fasthttp's Dial
// does) at most once a minute, each dial starting at the address after
// the last one's and trying the others in turn within dialTimeout.
type upstreamDialer struct {
	host string
	port uint16
	ip   netip.Addr // the host, when an IP address

	mu     sync.Mutex
	addrs  []netip.Addr
	looked time.Time // when addrs were looked up
	next   int
}

// newUpstreamDialer takes addr, host:port.
func newUpstreamDialer(addr string) (*upstreamDialer, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, &net.AddrError{Err: "invalid port", Addr: addr}
	}
	d := &upstreamDialer{host: host, port: uint16(p)}
	d.ip, _ = netip.ParseAddr(host)
	return d, nil
}

// dial connects to the upstream.
func (d *upstreamDialer) dial() (net.Conn, error) {
	if d.ip.IsValid() {
		return sock.Dial(netip.AddrPortFrom(d.ip, d.port), dialTimeout)
	}
	deadline := time.Now().Add(dialTimeout)
	addrs, first, err := d.lookup(deadline)
	if err != nil {
		return nil, err
	}
	for i := range addrs {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		var c net.Conn
		if c, err = sock.Dial(netip.AddrPortFrom(addrs[(first+i)%len(addrs)], d.port), left); err == nil {
			return c, nil
		}
	}
	if err == nil {
		err = &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	}
	return nil, err
}

// lookup returns the host's addresses and the one to try first.
func (d *upstreamDialer) lookup(deadline time.Time) ([]netip.Addr, int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.addrs == nil || time.Since(d.looked) > dialCacheTime {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", d.host)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if len(addrs) == 0 {
			return nil, 0, &net.DNSError{Err: "no IPv4 address", Name: d.host, IsNotFound: true}
		}
		d.addrs, d.looked = addrs, time.Now()
	}
	d.next++
	return d.addrs, d.next % len(d.addrs), nil
}
