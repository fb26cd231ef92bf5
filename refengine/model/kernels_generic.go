//go:build !amd64 || purego

package model

// useAsm reports whether the assembly kernels are in use.
var useAsm = false

func setUseAsm(bool) {}

func kern4x16(y []float32, ldy int, x []float32, ldx int, panel []float32, k int) {
	kern4x16Go(y, ldy, x, ldx, panel, k)
}

func kern1x16(y []float32, x []float32, panel []float32, k int) { kern1x16Go(y, x, panel, k) }
