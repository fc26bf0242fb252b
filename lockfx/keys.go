package lockfx

import (
	"strings"

	"github.com/redisfx/redisfx"
)

// ErrEmptyName means Acquire was given the empty lock name, almost always
// a missing id; refused before any Redis call.
var ErrEmptyName = &redisfx.BaseError{Code: "lock_name_empty", Message: "lockfx: the lock name is empty"}

// lockKeys are the Redis keys of one lock name, in one Cluster slot.
type lockKeys struct {
	lock  string // the owner, with the lease as its expiry
	fence string // the last fencing token handed out for the name
}

// abandoned is the key of one owner's marker (see acquireScript).
func (k lockKeys) abandoned(owner string) string { return k.fence + ":abandoned:" + owner }

// keysOf lays out KeyPrefix + "{" + name + "}" and its ":fence" counter,
// sharing the hash tag {name}. A name starting with "}" (its tag would be
// empty, hashing the whole key) gets KeyPrefix + "~{~}" + name + "}",
// which no other name's key can equal.
func (l *Locker) keysOf(name string) (lockKeys, error) {
	if name == "" {
		return lockKeys{}, ErrEmptyName
	}
	tag := "{"
	if name[0] == '}' {
		tag = "~{~}"
	}
	lock := l.cfg.KeyPrefix + tag + name + "}"
	return lockKeys{lock: lock, fence: lock + ":fence"}, nil
}

func emptyHashTag(prefix string) bool {
	_, tag, ok := strings.Cut(prefix, "{")
	return ok && strings.HasPrefix(tag, "}")
}
