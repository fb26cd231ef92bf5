package predict

import "math"

// The outlier rule's constants: an observation is far from the fit when
// its residual exceeds farScale times the fit's usual residual plus
// farShare of the fit's own value; a fit is trusted to judge that once it
// has seen warm observations.
const (
	farScale = 3
	farShare = 0.25
	warm     = 4
)

// fit is a least-squares line y ≈ a + b·x over weighted observations,
// every weight decaying together (decay), so that the line follows the
// recent ones. It is used with x = 0 throughout for a decaying mean.
//
// Outliers: an observation far from the line (far) is taken as at most
// the bound when it is the first far one in its direction; the next far
// one in the same direction is believed, and so is every one after it
// until one falls within the bound again. One slow request barely moves
// the line; a change of regime moves it from its second observation on.
//
// Not safe for concurrent use: its Model's mutex guards it.
type fit struct {
	w, sx, sy, sxx, sxy float64 // weighted sums
	sr                  float64 // weighted absolute residuals (as taken)
	n                   int     // observations taken, undecayed
	run                 int8    // the direction of the last far residual, 0 after a near one
	a, b                float64 // the line, solved after each observation
	// costed says the cost has a fixed part of at least zero: where the
	// best line would start below zero, the best one through the origin
	// is taken. Unset, such a line is kept (a knee: a queue that starts
	// only past the engine's free slots) and read as zero below the axis.
	// proportional says a slope below zero is read as a cost in
	// proportion to x too (the line through the origin), not as none (the
	// mean).
	costed, proportional bool
}

// residual is the mean absolute residual of the observations taken (0
// before any): how well the line fits them.
func (f *fit) residual() float64 {
	if f.w == 0 {
		return 0
	}
	return f.sr / f.w
}

// at is the line at x, never below zero.
func (f *fit) at(x float64) float64 { return max(f.a+f.b*x, 0) }

// decay scales every weight by d.
func (f *fit) decay(d float64) {
	f.w *= d
	f.sx *= d
	f.sy *= d
	f.sxx *= d
	f.sxy *= d
	f.sr *= d
}

// add takes the observation (x, y) with weight w and solves the line again.
func (f *fit) add(w, x, y float64) {
	if f.n > 0 {
		p := f.at(x)
		r := y - p
		if f.n >= warm {
			r = f.far(r, farScale*f.sr/f.w+farShare*p)
			y = p + r
		}
		f.sr += w * math.Abs(r)
	}
	f.w += w
	f.sx += w * x
	f.sy += w * y
	f.sxx += w * x * x
	f.sxy += w * x * y
	f.n++
	f.solve()
}

// far applies the outlier rule to residual r against bound: r itself, or
// the bound for the first far residual in its direction.
func (f *fit) far(r, bound float64) float64 {
	dir := int8(1)
	if r < 0 {
		dir = -1
	}
	switch {
	case math.Abs(r) <= bound:
		f.run = 0
	case f.run != dir:
		f.run = dir
		r = float64(dir) * bound
	}
	return r
}

// solve fits the line to the sums. With x spread by less than half a unit
// (one prompt size, one queue length) the slope cannot be told: the cost is
// taken as proportional to x (a = 0), or as the mean when x is zero. A
// slope below zero (a cost that falls as x grows) cannot be told either:
// it is taken as none (the mean), or, when proportional, the best line
// through the origin is taken; so is it when costed and the fixed part
// would be below zero.
func (f *fit) solve() {
	mx, my := f.sx/f.w, f.sy/f.w
	vx := f.sxx/f.w - mx*mx
	switch {
	case vx < 0.25 && mx > 0:
		f.a, f.b = 0, my/mx
	case vx < 0.25:
		f.a, f.b = my, 0
	default:
		f.b = (f.sxy/f.w - mx*my) / vx
		if f.b < 0 && !f.proportional {
			f.b = 0
		}
		f.a = my - f.b*mx
		if f.b < 0 || (f.a < 0 && f.costed) {
			f.a, f.b = 0, f.sxy/f.sxx
		}
	}
}
