package predict

// windowSize is how many of its newest observations a median keeps.
const windowSize = 16

// window is a weighted median over the newest windowSize observations,
// each weight decaying with its fit's: a part whose time is mostly steady
// with a long tail (a decode step or a write that waited for a core) is
// predicted at what most requests took, which the mean, pulled up by the
// tail, overstates for most of them.
//
// Not safe for concurrent use: its Model's mutex guards it.
type window struct {
	v, w [windowSize]float64
	next int // where the next observation goes
	n    int // observations held, at most windowSize
}

// decay scales every weight by d.
func (q *window) decay(d float64) {
	for i := range q.n {
		q.w[i] *= d
	}
}

// add takes the observation v with weight w, in place of the oldest once
// full.
func (q *window) add(w, v float64) {
	q.v[q.next], q.w[q.next] = v, w
	q.next = (q.next + 1) % windowSize
	q.n = min(q.n+1, windowSize)
}

// median is the least value at or below which lies at least half the
// weight held (0 before any observation).
func (q *window) median() float64 {
	var v, w [windowSize]float64
	total := 0.0
	for i := range q.n {
		j := i
		for ; j > 0 && v[j-1] > q.v[i]; j-- {
			v[j], w[j] = v[j-1], w[j-1]
		}
		v[j], w[j] = q.v[i], q.w[i]
		total += q.w[i]
	}
	sum := 0.0
	for i := range q.n {
		sum += w[i]
		if sum*2 >= total {
			return v[i]
		}
	}
	return 0
}
