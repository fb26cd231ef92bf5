package prefix

import "testing"

// TestXXH64: the hash is XXH64. The vectors are the reference's
// (github.com/cespare/xxhash/v2 v2.3.0, NewWithSeed, WriteString, Sum64),
// across the paths: empty, the byte tail, the 4-byte tail, one 32-byte
// stripe, a whole 64-byte block, two stripes with every tail.
func TestXXH64(t *testing.T) {
	for _, tc := range []struct {
		in   string
		seed uint64
		want uint64
	}{
		{"", 0x0, 0xef46db3751d8e999},
		{"a", 0x0, 0xd24ec4f1a98c6e5b},
		{"abc", 0x0, 0x44bc2cf5ad770999},
		{"0123456789abcdef0123456789abcdef", 0x0, 0x642a94958e71e6c5},
		{"Call me Ishmael. Some years ago--never mind how long precisely-!", 0x0, 0x79105e3413b4929a},
		{"The quick brown fox jumps over the lazy dog, 43 bytes", 0x0, 0x642341d2bc8ae263},
		{"", 0x1, 0xd5afba1336a3be4b},
		{"a", 0x1, 0xdec2bc81c3cd46c6},
		{"abc", 0x1, 0xbea9ca8199328908},
		{"0123456789abcdef0123456789abcdef", 0x1, 0x48b8b580878a4a4},
		{"Call me Ishmael. Some years ago--never mind how long precisely-!", 0x1, 0xdbf9213a80affe16},
		{"The quick brown fox jumps over the lazy dog, 43 bytes", 0x1, 0x793d6a978c0ca781},
		{"", 0x9e3779b185ebca87, 0x6ec6d05f61c7e7a7},
		{"a", 0x9e3779b185ebca87, 0x727c10e0d238e188},
		{"abc", 0x9e3779b185ebca87, 0xa7cb2aac405e36c7},
		{"0123456789abcdef0123456789abcdef", 0x9e3779b185ebca87, 0xaa5e2782bf0500cd},
		{"Call me Ishmael. Some years ago--never mind how long precisely-!", 0x9e3779b185ebca87, 0x1b7f1a65f4df89e5},
		{"The quick brown fox jumps over the lazy dog, 43 bytes", 0x9e3779b185ebca87, 0x6570088c53020cd0},
	} {
		if got := xxh64([]byte(tc.in), tc.seed); got != tc.want {
			t.Errorf("xxh64(%q, %#x) = %#x, want %#x", tc.in, tc.seed, got, tc.want)
		}
	}
}
