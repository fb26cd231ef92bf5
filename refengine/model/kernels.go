package model

// This file holds the float32 compute kernels and their portable Go versions.
//
// Weight matrices are stored "packed": a matrix W with n output rows and k
// inputs (llama2.c's (out, in) row-major layout) is cut into panels of
// panelWidth consecutive output rows, and each panel is stored transposed,
// k-major: data[(p*k+kk)*panelWidth+j] = W[p*panelWidth+j][kk] (zero padded
// past n). A matrix product Y = X·Wᵀ then streams every panel once and reuses
// each loaded weight vector for several rows of X (register tiling: the
// assembly kernel keeps a 4x16 tile of outputs in 8 AVX registers).

// panelWidth is the number of output columns per packed panel.
const panelWidth = 16

// packed is a weight matrix in panel layout (see the file comment).
// It is immutable after construction and safe for concurrent readers.
type packed struct {
	n, k int
	data []float32
}

// packRows packs the matrix whose output rows are rows (each of length k).
func packRows(rows [][]float32, k int) packed {
	n := len(rows)
	np := (n + panelWidth - 1) / panelWidth
	pm := packed{n: n, k: k, data: make([]float32, np*k*panelWidth)}
	for i, row := range rows {
		p, j := i/panelWidth, i%panelWidth
		base := p * k * panelWidth
		for kk, v := range row[:k] {
			pm.data[base+kk*panelWidth+j] = v
		}
	}
	return pm
}

// bytes returns the size of the packed weights in bytes (padding included).
func (w *packed) bytes() int { return 4 * len(w.data) }

// matmul computes y[r*ldy+j] = Σ_kk x[r*ldx+kk]·W[j][kk] for r < rows, j < w.n.
// y must not alias x.
func matmul(y []float32, ldy int, x []float32, ldx int, rows int, w *packed) {
	if rows == 0 || w.n == 0 {
		return
	}
	k := w.k
	_ = x[(rows-1)*ldx+k-1]
	_ = y[(rows-1)*ldy+w.n-1]
	var tmp [4 * panelWidth]float32
	np := (w.n + panelWidth - 1) / panelWidth
	for p := 0; p < np; p++ {
		panel := w.data[p*k*panelWidth : (p+1)*k*panelWidth]
		col := p * panelWidth
		full := col+panelWidth <= w.n
		r := 0
		for ; r+4 <= rows; r += 4 {
			if full {
				kern4x16(y[r*ldy+col:], ldy, x[r*ldx:], ldx, panel, k)
				continue
			}
			kern4x16(tmp[:], panelWidth, x[r*ldx:], ldx, panel, k)
			for i := 0; i < 4; i++ {
				copy(y[(r+i)*ldy+col:(r+i)*ldy+w.n], tmp[i*panelWidth:])
			}
		}
		for ; r < rows; r++ {
			if full {
				kern1x16(y[r*ldy+col:], x[r*ldx:], panel, k)
				continue
			}
			kern1x16(tmp[:], x[r*ldx:], panel, k)
			copy(y[r*ldy+col:r*ldy+w.n], tmp[:])
		}
	}
}

// kern4x16Go is the portable 4-row micro-kernel: it writes the 4x16 tile
// y[i*ldy+j] = Σ_kk x[i*ldx+kk]·panel[kk*16+j].
func kern4x16Go(y []float32, ldy int, x []float32, ldx int, panel []float32, k int) {
	for i := 0; i < 4; i++ {
		kern1x16Go(y[i*ldy:], x[i*ldx:], panel, k)
	}
}

// kern1x16Go is the portable 1-row micro-kernel: y[j] = Σ_kk x[kk]·panel[kk*16+j].
func kern1x16Go(y []float32, x []float32, panel []float32, k int) {
	var a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 float32
	x = x[:k]
	panel = panel[:k*panelWidth]
	for kk, xv := range x {
		w := panel[kk*panelWidth : kk*panelWidth+panelWidth : kk*panelWidth+panelWidth]
		a0 += xv * w[0]
		a1 += xv * w[1]
		a2 += xv * w[2]
		a3 += xv * w[3]
		a4 += xv * w[4]
		a5 += xv * w[5]
		a6 += xv * w[6]
		a7 += xv * w[7]
		a8 += xv * w[8]
		a9 += xv * w[9]
		a10 += xv * w[10]
		a11 += xv * w[11]
		a12 += xv * w[12]
		a13 += xv * w[13]
		a14 += xv * w[14]
		a15 += xv * w[15]
	}
	y = y[:panelWidth]
	y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7] = a0, a1, a2, a3, a4, a5, a6, a7
	y[8], y[9], y[10], y[11], y[12], y[13], y[14], y[15] = a8, a9, a10, a11, a12, a13, a14, a15
}
