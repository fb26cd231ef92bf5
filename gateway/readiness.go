package gateway

import (
	"strconv"
	"time"
)

// AppendHealth appends the proxy's readiness to dst and reports it. The
// proxy is ready while at least one pool has an upstream in rotation
// (healthy and not ejected): a proxy that can serve some of its models
// stays ready, so an outage of one pool does not take every replica out of
// its load balancer. With every upstream in rotation the answer is
// {"status":"ok"}; with none in rotation the status is "not_ready", with
// the reason. Upstreams out of rotation are counted ("out_of_rotation"),
// and with detail listed under "unhealthy": each one's pool, the reason
// ("health check failed" with the last probe's error, or "passive
// ejection"), since when (RFC 3339, UTC) and for how long. The detail
// names internal addresses and errors: it is for the admin listener, not
// for clients.
func (s *Snapshot) AppendHealth(dst []byte, detail bool) ([]byte, bool) {
	now := s.g.now()
	ready, n := false, 0
	var list []byte // ",{…},{…}"
	for _, p := range s.pools {
		for _, u := range p.Upstreams {
			var out bool
			if list, out = u.appendIfOut(list, p.Name, now); out {
				n++
			} else {
				ready = true
			}
		}
	}
	if ready {
		dst = append(dst, `{"status":"ok"`...)
	} else {
		dst = append(dst, `{"status":"not_ready","reason":"no upstream in rotation"`...)
	}
	if n > 0 {
		dst = append(dst, `,"out_of_rotation":`...)
		dst = strconv.AppendInt(dst, int64(n), 10)
	}
	if n > 0 && detail {
		dst = append(dst, `,"unhealthy":[`...)
		dst = append(dst, list[1:]...)
		dst = append(dst, ']')
	}
	return append(dst, '}'), ready
}

// appendIfOut appends ',' and u as a JSON object when u is out of rotation
// in pool, and reports whether it is. The verdict, the ejection and when
// it went out are read together, under the lock every change holds (and
// every change that takes u out is logged, so hlog.since is when it went).
func (u *Upstream) appendIfOut(dst []byte, pool string, now int64) ([]byte, bool) {
	u.hlog.mu.Lock()
	healthy, since, probeErr := u.healthy.Load(), u.hlog.since, u.hlog.probeErr
	out := !healthy || u.ejectedUntil.Load() > now
	u.hlog.mu.Unlock()
	if !out {
		return dst, false
	}
	dst = append(dst, `,{"upstream":`...)
	dst = appendJSONString(dst, u.Name)
	dst = append(dst, `,"pool":`...)
	dst = appendJSONString(dst, pool)
	if healthy {
		dst = append(dst, `,"reason":"passive ejection"`...)
	} else {
		dst = append(dst, `,"reason":"health check failed"`...)
		if probeErr != nil {
			dst = append(dst, `,"error":`...)
			dst = appendJSONString(dst, probeErr.Error())
		}
	}
	dst = append(dst, `,"unhealthy_since":"`...)
	dst = u.g.start.Add(time.Duration(since)).UTC().AppendFormat(dst, time.RFC3339)
	dst = append(dst, `","unhealthy_for":`...)
	dst = appendJSONString(dst, time.Duration(now-since).Round(time.Millisecond).String())
	return append(dst, '}'), true
}
