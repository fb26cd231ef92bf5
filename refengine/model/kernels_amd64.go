//go:build amd64 && !purego

package model

import "golang.org/x/sys/cpu"

// useAsm reports whether the AVX2+FMA assembly kernels are in use; when the
// CPU lacks them the portable Go kernels run instead.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// setUseAsm switches between the assembly and portable kernels (tests only;
// not safe while a Step runs).
func setUseAsm(on bool) { useAsm = on && cpu.X86.HasAVX2 && cpu.X86.HasFMA }

//go:noescape
func sgemm4x16AVX(y *float32, ldy int, x *float32, ldx int, panel *float32, k int)

//go:noescape
func sgemm1x16AVX(y *float32, x *float32, panel *float32, k int)

// kern4x16 writes the 4x16 output tile y[i*ldy+j] = Σ_kk x[i*ldx+kk]·panel[kk*16+j].
func kern4x16(y []float32, ldy int, x []float32, ldx int, panel []float32, k int) {
	if !useAsm || k == 0 {
		kern4x16Go(y, ldy, x, ldx, panel, k)
		return
	}
	_ = y[3*ldy+panelWidth-1]
	_ = x[3*ldx+k-1]
	_ = panel[k*panelWidth-1]
	sgemm4x16AVX(&y[0], ldy, &x[0], ldx, &panel[0], k)
}

// kern1x16 writes y[j] = Σ_kk x[kk]·panel[kk*16+j] for j < 16.
func kern1x16(y []float32, x []float32, panel []float32, k int) {
	if !useAsm || k == 0 {
		kern1x16Go(y, x, panel, k)
		return
	}
	_ = y[panelWidth-1]
	_ = x[k-1]
	_ = panel[k*panelWidth-1]
	sgemm1x16AVX(&y[0], &x[0], &panel[0], k)
}
