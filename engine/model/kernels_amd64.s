//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA kernels; see kernels.go for the packed panel layout.
// Operand order is Go's: VFMADD231PS a, b, acc computes acc += b*a.

// func sgemm4x16AVX(y *float32, ldy int, x *float32, ldx int, panel *float32, k int)
TEXT ·sgemm4x16AVX(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ ldy+8(FP), R9
	MOVQ x+16(FP), SI
	MOVQ ldx+24(FP), BX
	MOVQ panel+32(FP), DX
	MOVQ k+40(FP), CX
	SHLQ $2, BX
	SHLQ $2, R9
	LEAQ (BX)(BX*2), R8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop:
	VMOVUPS      (DX), Y8
	VMOVUPS      32(DX), Y9
	VBROADCASTSS (SI), Y10
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VBROADCASTSS (SI)(BX*1), Y11
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VBROADCASTSS (SI)(BX*2), Y12
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VBROADCASTSS (SI)(R8*1), Y13
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         $64, DX
	ADDQ         $4, SI
	DECQ         CX
	JNE          loop

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    R9, DI
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ    R9, DI
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ    R9, DI
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	VZEROUPPER
	RET

// func sgemm1x16AVX(y *float32, x *float32, panel *float32, k int)
TEXT ·sgemm1x16AVX(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ panel+16(FP), DX
	MOVQ k+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	CMPQ   CX, $4
	JLT    tail

loop4:
	VBROADCASTSS (SI), Y8
	VFMADD231PS  (DX), Y8, Y0
	VFMADD231PS  32(DX), Y8, Y1
	VBROADCASTSS 4(SI), Y9
	VFMADD231PS  64(DX), Y9, Y2
	VFMADD231PS  96(DX), Y9, Y3
	VBROADCASTSS 8(SI), Y10
	VFMADD231PS  128(DX), Y10, Y4
	VFMADD231PS  160(DX), Y10, Y5
	VBROADCASTSS 12(SI), Y11
	VFMADD231PS  192(DX), Y11, Y6
	VFMADD231PS  224(DX), Y11, Y7
	ADDQ         $256, DX
	ADDQ         $16, SI
	SUBQ         $4, CX
	CMPQ         CX, $4
	JGE          loop4

tail:
	TESTQ CX, CX
	JEQ   done

tail1:
	VBROADCASTSS (SI), Y8
	VFMADD231PS  (DX), Y8, Y0
	VFMADD231PS  32(DX), Y8, Y1
	ADDQ         $64, DX
	ADDQ         $4, SI
	DECQ         CX
	JNE          tail1

done:
	VADDPS  Y2, Y0, Y0
	VADDPS  Y3, Y1, Y1
	VADDPS  Y6, Y4, Y4
	VADDPS  Y7, Y5, Y5
	VADDPS  Y4, Y0, Y0
	VADDPS  Y5, Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VZEROUPPER
	RET

// func dotAVX(a, b *float32, n int) float32
TEXT ·dotAVX(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	CMPQ   CX, $16
	JLT    dot8

dotloop16:
	VMOVUPS     (SI), Y2
	VMOVUPS     32(SI), Y3
	VFMADD231PS (DI), Y2, Y0
	VFMADD231PS 32(DI), Y3, Y1
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	CMPQ        CX, $16
	JGE         dotloop16

dot8:
	CMPQ        CX, $8
	JLT         dotreduce
	VMOVUPS     (SI), Y2
	VFMADD231PS (DI), Y2, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX

dotreduce:
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	TESTQ        CX, CX
	JEQ          dotdone

dottail:
	VMOVSS      (SI), X2
	VFMADD231SS (DI), X2, X0
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        CX
	JNE         dottail

dotdone:
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func axpyAVX(alpha float32, x, y *float32, n int)
TEXT ·axpyAVX(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ         x+8(FP), SI
	MOVQ         y+16(FP), DI
	MOVQ         n+24(FP), CX
	CMPQ         CX, $16
	JLT          axpy8

axpyloop16:
	VMOVUPS     (DI), Y1
	VMOVUPS     32(DI), Y2
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	CMPQ        CX, $16
	JGE         axpyloop16

axpy8:
	CMPQ        CX, $8
	JLT         axpytail
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX

axpytail:
	TESTQ CX, CX
	JEQ   axpydone

axpytail1:
	VMOVSS      (DI), X1
	VFMADD231SS (SI), X0, X1
	VMOVSS      X1, (DI)
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        CX
	JNE         axpytail1

axpydone:
	VZEROUPPER
	RET
