// Package share shares a gateway's least_ttft routing with the other
// replicas of a Deployment: each request routed here is published (its
// upstream, the prompt tokens it was sent to compute, its predicted engine
// time, its prompt's prefix chain, the replica's requests on the
// upstream), and its end too (the count again), and each replica applies
// the others' as if it had routed them itself: into its prefix index, its
// count of tokens sent each upstream (the prefixes' distances), the
// upstreams' backlogs and their requests in flight. What each finished
// request taught its upstream's TTFT model is published too, and every
// replica's model of that upstream learns it. Every replica then knows
// where every prefix was sent, not a third of it, what is on its way to
// each engine, and what every request on it measured.
//
// Publishing never blocks a request: messages are encoded into pooled
// buffers and queued; a full queue drops the message (counted). Messages go
// through a Transport: Redis pub/sub (NewRedis), or a test's. Nothing is
// stored: a replica that starts, or loses Redis for a while, misses what
// was routed meanwhile, and learns it again from what is routed next.
//
// It imports gateway/predict (the observation), gateway/prefix (the
// chain's bound) and internal/clock.
package share
