package slotstore

import (
	"encoding/binary"
	"errors"
)

// KeyName is the Data key under which the workers share the hash key.
const KeyName = "diana/hash-key"

// LoadKey returns the hash key stored in d, after storing one from random (16 random bytes)
// when there is none. Every worker of a vm_id must hash with the same key, or a client's state
// would be split across slots: a worker that starts while no key is stored writes its own and
// reads back what is stored, but two workers doing so at the same moment can each keep their
// own; calling LoadKey again later (the filter does on every tick) makes them agree.
func LoadKey(d Data, random func([]byte) error) ([2]uint64, error) {
	val, cas, err := d.Get(KeyName)
	if err == nil && len(val) == 16 {
		return [2]uint64{binary.LittleEndian.Uint64(val), binary.LittleEndian.Uint64(val[8:])}, nil
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return [2]uint64{}, errors.New("shared data: reading " + KeyName + ": " + err.Error())
	}
	b := make([]byte, 16)
	if err := random(b); err != nil {
		return [2]uint64{}, errors.New("hash key: no random bytes: " + err.Error())
	}
	if err := d.Set(KeyName, b, cas); err != nil && !errors.Is(err, ErrCasMismatch) {
		return [2]uint64{}, errors.New("shared data: writing " + KeyName + ": " + err.Error())
	}
	val, _, err = d.Get(KeyName) // ours, or the one another worker stored first
	if err != nil || len(val) != 16 {
		return [2]uint64{}, errors.New("shared data: " + KeyName + " unreadable after writing it")
	}
	return [2]uint64{binary.LittleEndian.Uint64(val), binary.LittleEndian.Uint64(val[8:])}, nil
}
