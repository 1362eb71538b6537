package slotstore

import "math/bits"

// sipHash is SipHash-2-4 (Aumasson and Bernstein, 2012) of s under the key k0, k1: a keyed
// hash whose outputs an attacker cannot predict, nor pick colliding inputs for, without the key.
// Written out because hash/maphash's seed cannot be shared between Envoy's workers (each is its
// own VM) and TinyGo lacks it.
func sipHash(k0, k1 uint64, s string) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(s)
	for ; len(s) >= 8; s = s[8:] {
		m := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		v3 ^= m
		v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
		v0 ^= m
	}
	m := uint64(n) << 56 // the last block: the remaining bytes and the length's low byte
	for i := len(s) - 1; i >= 0; i-- {
		m |= uint64(s[i]) << (8 * i)
	}
	v3 ^= m
	v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
	v0 ^= m
	v2 ^= 0xff
	v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
	v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
	return v0 ^ v1 ^ v2 ^ v3
}

// sipRound is one SipRound.
func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13) ^ v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16) ^ v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21) ^ v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17) ^ v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
