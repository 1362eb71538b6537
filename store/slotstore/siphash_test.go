package slotstore

import "testing"

// The reference vectors of the SipHash paper (Appendix A and vectors.h): key 00 01 … 0f,
// messages 00 01 … (n−1) for n = 0…
func TestSipHashVectors(t *testing.T) {
	const k0, k1 = 0x0706050403020100, 0x0f0e0d0c0b0a0908
	want := []uint64{
		0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
		0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
		0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
		0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
	}
	msg := make([]byte, len(want))
	for i := range msg {
		msg[i] = byte(i)
	}
	for n, w := range want {
		if got := sipHash(k0, k1, string(msg[:n])); got != w {
			t.Errorf("SipHash-2-4 of %d bytes = %#016x, want %#016x", n, got, w)
		}
	}
}
