package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func closeEnough(a, b, tol float32) bool {
	d := float64(a - b)
	return math.Abs(d) <= float64(tol)*(1+math.Abs(float64(b)))
}

// naiveMatmul is the reference: y[r][j] = Σ x[r][kk]·w[j][kk].
func naiveMatmul(x []float32, rows, k int, w [][]float32) []float32 {
	y := make([]float32, rows*len(w))
	for r := 0; r < rows; r++ {
		for j, wr := range w {
			var s float64
			for kk := 0; kk < k; kk++ {
				s += float64(x[r*k+kk]) * float64(wr[kk])
			}
			y[r*len(w)+j] = float32(s)
		}
	}
	return y
}

// withKernels runs f once with the portable kernels and, when available,
// once with the assembly kernels.
func withKernels(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useAsm
	defer func() { setUseAsm(saved) }()
	setUseAsm(false)
	t.Run("go", f)
	if saved {
		setUseAsm(true)
		t.Run("asm", f)
	}
}

func TestMatmulMatchesNaive(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, tc := range []struct{ rows, n, k int }{
			{1, 1, 1}, {1, 16, 8}, {3, 17, 5}, {4, 16, 16}, {5, 33, 7}, {7, 50, 97}, {9, 31, 288}, {13, 100, 3},
		} {
			w := make([][]float32, tc.n)
			for i := range w {
				w[i] = randSlice(rng, tc.k)
			}
			x := randSlice(rng, tc.rows*tc.k)
			pw := packRows(w, tc.k)
			got := make([]float32, tc.rows*tc.n)
			matmul(got, tc.n, x, tc.k, tc.rows, &pw)
			want := naiveMatmul(x, tc.rows, tc.k, w)
			for i := range want {
				if !closeEnough(got[i], want[i], 1e-4) {
					t.Fatalf("rows=%d n=%d k=%d: y[%d] = %v, want %v", tc.rows, tc.n, tc.k, i, got[i], want[i])
				}
			}
		}
	})
}

func TestExpf(t *testing.T) {
	for x := float32(-90); x < 88; x += 0.0137 {
		got, want := expf(x), math.Exp(float64(x))
		if x < -87 {
			if got != 0 {
				t.Fatalf("expf(%v) = %v, want 0", x, got)
			}
			continue
		}
		if math.Abs(float64(got)-want) > 4e-7*want {
			t.Fatalf("expf(%v) = %v, want %v", x, got, want)
		}
	}
}
