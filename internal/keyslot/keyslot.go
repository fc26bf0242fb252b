// Package keyslot computes Redis Cluster hash slots, so that a key can be
// named in the slot of another (a script may touch only one slot).
package keyslot

import (
	"strconv"
	"strings"
	"sync"
)

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Tag returns the part of key that Redis Cluster hashes: the first {…}
// with something inside, else the whole key.
func Tag(key string) (tag string, tagged bool) {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			return key[open+1 : open+1+n], true
		}
	}
	return key, false
}

// Of returns key's hash slot.
func Of(key string) int {
	tag, _ := Tag(key)
	var crc uint16 // CRC-16/XMODEM, as Redis Cluster computes it
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % Slots)
}

// ForSlot returns a hash tag content whose slot is slot.
func ForSlot(slot int) string { return tags()[slot] }

// tags are the shortest base-36 numbers, one per slot.
var tags = sync.OnceValue(func() []string {
	t, left := make([]string, Slots), Slots
	for i := int64(0); left > 0; i++ {
		s := strconv.FormatInt(i, 36)
		if slot := Of(s); t[slot] == "" {
			t[slot], left = s, left-1
		}
	}
	return t
})
