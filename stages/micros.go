package stages

import (
	"strconv"
	"time"
)

// Micros rounds d to whole microseconds, half away from zero.
func Micros(d time.Duration) int64 {
	if d < 0 {
		return -((-int64(d) + 500) / 1000)
	}
	return (int64(d) + 500) / 1000
}

// Micros rounds b's stages to whole microseconds so that they add up
// exactly to the rounded TTFT, which it returns.
//
// Rounding each stage on its own can make the sum drift from the rounded
// TTFT by up to half a microsecond per stage (4 µs over 8 stages), which
// would break the identity the log promises ("stages_ms adds up to ttft_ms
// to the microsecond"). Instead the stage boundaries are rounded: with
// C_k = stage_0 + … + stage_k (nanoseconds, exact), stage k becomes
// round(C_k) - round(C_{k-1}). The sum telescopes to round(C_7) =
// round(TTFT) exactly, each stage is within 1 µs of its true value, and no
// stage goes negative because rounding is monotone and C_k never decreases
// (Breakdown never yields a negative stage; a negative one would be a bug
// and is clamped to 0 here).
func (b *Breakdown) Micros(us *[NumStages]int64) int64 {
	var cum time.Duration
	var prev int64
	for i, d := range b.Stages {
		cum += max(d, 0)
		r := Micros(cum)
		us[i] = r - prev
		prev = r
	}
	return prev
}

// AppendMillis appends us microseconds as milliseconds with up to three
// decimals, exactly ("12.345", "0.007", "3"), without float rounding.
func AppendMillis(b []byte, us int64) []byte {
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return b
	}
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	for b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	return b
}
