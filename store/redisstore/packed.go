package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The mixed script's reply (scripts.Mixed) is cmsgpack's packing of one entry per decision: an
// array of integers, or a map {err = message} for a decision that failed. unpacker reads the
// few MessagePack forms cmsgpack gives them, from the reply as go-redis hands it over, a string;
// anything else is an error.
type unpacker struct {
	s   string
	err error
}

var errPacked = errors.New("not the MessagePack of a batch reply")

// next returns the next byte, or sets u.err.
func (u *unpacker) next() byte {
	if len(u.s) == 0 {
		u.err = errPacked
		return 0
	}
	b := u.s[0]
	u.s = u.s[1:]
	return b
}

// uint reads an n-byte big-endian unsigned integer.
func (u *unpacker) uint(n int) uint64 {
	if len(u.s) < n {
		u.err = errPacked
		return 0
	}
	var b [8]byte
	copy(b[8-n:], u.s[:n])
	u.s = u.s[n:]
	return binary.BigEndian.Uint64(b[:])
}

// header reads an array's or a map's header: its length, and whether it is a map.
func (u *unpacker) header() (n int, isMap bool) {
	switch b := u.next(); {
	case b >= 0x90 && b <= 0x9f:
		return int(b & 0x0f), false
	case b >= 0x80 && b <= 0x8f:
		return int(b & 0x0f), true
	case b == 0xdc:
		return int(u.uint(2)), false
	case b == 0xdd:
		return int(u.uint(4)), false
	case b == 0xde:
		return int(u.uint(2)), true
	case b == 0xdf:
		return int(u.uint(4)), true
	}
	u.err = errPacked
	return 0, false
}

// int reads an integer.
func (u *unpacker) int() int64 {
	switch b := u.next(); {
	case b <= 0x7f:
		return int64(b)
	case b >= 0xe0:
		return int64(int8(b))
	case b >= 0xcc && b <= 0xcf: // uint 8, 16, 32, 64
		v := u.uint(1 << (b - 0xcc))
		if v > 1<<63-1 {
			u.err = errPacked
		}
		return int64(v)
	case b >= 0xd0 && b <= 0xd3: // int 8, 16, 32, 64
		n := 1 << (b - 0xd0)
		return int64(u.uint(n)<<(64-8*n)) >> (64 - 8*n)
	}
	u.err = errPacked
	return 0
}

// str reads a string.
func (u *unpacker) str() string {
	var n int
	switch b := u.next(); {
	case b >= 0xa0 && b <= 0xbf:
		n = int(b & 0x1f)
	case b == 0xd9:
		n = int(u.uint(1))
	case b == 0xda:
		n = int(u.uint(2))
	case b == 0xdb:
		n = int(u.uint(4))
	default:
		u.err = errPacked
	}
	if u.err != nil || len(u.s) < n {
		u.err = errPacked
		return ""
	}
	v := u.s[:n]
	u.s = u.s[n:]
	return v
}

// entry reads one decision's entry: its integers (at most len(ints)), or its error.
func (u *unpacker) entry(ints *[8]int64) (n int, failed error) {
	if u.err != nil {
		return 0, nil
	}
	n, isMap := u.header()
	switch {
	case u.err != nil:
	case isMap:
		if n != 1 || u.str() != "err" {
			u.err = errPacked
		}
		msg := u.str()
		if u.err == nil {
			return 0, scriptError(msg)
		}
	case n > len(ints):
		u.err = fmt.Errorf("%d integers, want at most %d", n, len(ints))
	default:
		for i := range n {
			ints[i] = u.int()
		}
	}
	return n, nil
}

// scriptError is the error of a decision that failed in the mixed script: Redis's error reply
// (a redis.Error), as it is when it comes on its own.
type scriptError string

func (e scriptError) Error() string { return string(e) }
func (scriptError) RedisError()     {}
