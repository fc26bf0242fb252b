package lockfx

import (
	"strings"

	"github.com/redisfx/redisfx"
)

// ErrEmptyName means Acquire was given the empty lock name. It is refused
// before any Redis call: an empty name is almost always a missing id, and
// would silently serialise every such caller on one lock.
var ErrEmptyName = &redisfx.BaseError{Code: "lock_name_empty", Message: "lockfx: the lock name is empty"}

// lockKeys are the Redis keys of one lock name. All of them share one
// Cluster hash tag, so that each script touches a single slot.
type lockKeys struct {
	lock  string // the owner, with the lease as its expiry
	fence string // the last fencing token handed out for the name
}

// abandoned is the key of one owner's marker (see acquireScript): its
// acquire must not take the lock any more. In the lock's slot.
func (k lockKeys) abandoned(owner string) string { return k.fence + ":abandoned:" + owner }

// keysOf lays out the keys of a lock name: KeyPrefix + "{" + name + "}"
// and its ":fence" counter share the hash tag {name}.
//
// Redis hashes the whole key when the first "{…}" is empty, so a name
// that starts with "}" (whose tag would be "{}") is laid out as
// KeyPrefix + "~{~}" + name + "}" instead: the tag is "~", and no other
// name's key can be equal (every other key has "{" right after the prefix).
// Lock keys always end in "}", so no lock key is another name's counter.
func (l *Locker) keysOf(name string) (lockKeys, error) {
	if name == "" {
		return lockKeys{}, ErrEmptyName
	}
	var lock string
	if name[0] == '}' {
		lock = l.cfg.KeyPrefix + "~{~}" + name + "}"
	} else {
		lock = l.cfg.KeyPrefix + "{" + name + "}"
	}
	return lockKeys{lock: lock, fence: lock + ":fence"}, nil
}

// emptyHashTag reports whether prefix's first "{" is closed at once: every
// key under it would then hash as a whole, the lock and its counter to
// different Cluster slots.
func emptyHashTag(prefix string) bool {
	i := strings.IndexByte(prefix, '{')
	return i >= 0 && i+1 < len(prefix) && prefix[i+1] == '}'
}
