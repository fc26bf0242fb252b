package idempotencyfx

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxJSONDepth is the deepest nesting of arrays and objects that a JSON
// body may have to be fingerprinted: encoding/json's own limit.
const MaxJSONDepth = 10000

var (
	errNotJSON = errors.New("not JSON")
	errTooDeep = errors.New("idempotencyfx: JSON nested deeper than MaxJSONDepth")
)

// The canonical form of a JSON document: 'a' + element count, then the
// elements; 'o' + member count, then per member sorted by key 'k' + key and
// the value; 's' + string (decoded as encoding/json decodes it); 'n' +
// number text; 't', 'f', 'z'. Counts and lengths are uvarints. Duplicate
// keys all count, in document order (encoding/json merges them). Where key
// order changes what encoding/json decodes, it is kept: an object with two
// keys equal under case folding is tagged 'O' and ordered by folded key,
// then document order; one with two keys of one integer ("1", "01") is
// tagged 'N' and ordered by class (see collision), then document order.

// node is one value of the parsed document, in document order. The children
// of a container follow it; an object's are key, value, key, value...
type node struct {
	start, end int32 // a string's bytes (in data, or in buf when esc) or a number's text
	next       int32 // the index after this node and its descendants
	count      int32 // elements of an array, members of an object
	kind       byte  // 'o' 'a' 's' 'n' 't' 'f' 'z'
	esc        bool  // the string was decoded into buf
}

// member is one member of an object being written: node indexes.
type member struct{ key, value int32 }

type canonicalizer struct {
	data    []byte
	ignore  *ignoreSet
	nodes   []node
	buf     []byte // decoded strings
	members []member
	folds   []folded
	foldBuf []byte
	scratch []byte // paths being looked up
	out     []byte
}

// canonical writes the canonical form of data to w, or nothing if data is
// not JSON (errNotJSON) or nests too deep (errTooDeep). json.Valid vouches
// for the grammar, so the parse only finds where each value ends.
func canonical(w io.Writer, data []byte, ignore *ignoreSet) error {
	if !json.Valid(data) {
		return invalid(data)
	}
	if len(data) > math.MaxInt32 {
		return errNotJSON
	}
	c, _ := canonicalizers.Get().(*canonicalizer)
	defer c.release()
	c.data, c.ignore = data, ignore
	c.nodes = slices.Grow(c.nodes[:0], 16+len(data)/8)
	c.value(c.ws(0))
	c.out = slices.Grow(c.out[:0], len(data)+16)
	c.emit(0, "", ignore != nil)
	_, _ = w.Write(c.out)
	return nil
}

// invalid tells why data is not JSON: errTooDeep when encoding/json's first
// error is its depth limit (MaxJSONDepth), errNotJSON otherwise.
func invalid(data []byte) error {
	var syntax *json.SyntaxError
	if errors.As(json.Unmarshal(data, new(struct{})), &syntax) && strings.HasSuffix(syntax.Error(), "exceeded max depth") {
		return errTooDeep
	}
	return errNotJSON
}

// canonicalizers keeps the parse's buffers between requests.
var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

// release empties c for the next body; buffers grown past 64 KiB are dropped.
func (c *canonicalizer) release() {
	if cap(c.out) > 64<<10 || cap(c.nodes) > 8<<10 {
		return
	}
	c.data, c.ignore, c.buf = nil, nil, c.buf[:0] // the other buffers are emptied where they are used
	canonicalizers.Put(c)
}

// value parses the (valid) value at i and returns where it ends.
func (c *canonicalizer) value(i int) int {
	d := c.data
	switch d[i] {
	case '{', '[':
		return c.container(i)
	case '"':
		return c.str(i)
	case 't':
		c.scalar('t', 0, 0, false)
		return i + len("true")
	case 'f':
		c.scalar('f', 0, 0, false)
		return i + len("false")
	case 'n':
		c.scalar('z', 0, 0, false)
		return i + len("null")
	}
	start := i
	for i < len(d) && (d[i] >= '0' && d[i] <= '9' || d[i] == '-' || d[i] == '+' || d[i] == '.' || d[i] == 'e' || d[i] == 'E') {
		i++
	}
	c.scalar('n', start, i, false)
	return i
}

func (c *canonicalizer) container(i int) int {
	d := c.data
	at := len(c.nodes)
	c.nodes = append(c.nodes, node{kind: 'a'})
	if d[i] == '{' {
		c.nodes[at].kind = 'o'
	}
	for i = c.ws(i + 1); d[i] != ']' && d[i] != '}'; i = c.ws(i) {
		if d[i] == ',' {
			i = c.ws(i + 1)
		}
		if c.nodes[at].kind == 'o' {
			i = c.ws(c.ws(c.str(i)) + 1) // the key and its colon
		}
		i = c.value(i)
		c.nodes[at].count++
	}
	c.nodes[at].next = int32(len(c.nodes))
	return i + 1
}

func (c *canonicalizer) ws(i int) int {
	for i < len(c.data) && (c.data[i] == ' ' || c.data[i] == '\t' || c.data[i] == '\n' || c.data[i] == '\r') {
		i++
	}
	return i
}

func (c *canonicalizer) scalar(kind byte, start, end int, esc bool) {
	c.nodes = append(c.nodes, node{kind: kind, start: int32(start), end: int32(end), next: int32(len(c.nodes) + 1), esc: esc})
}

// str reads the string at i (which is '"'). One of printable ASCII without
// escapes is kept in place; any other is decoded into buf.
func (c *canonicalizer) str(i int) int {
	d := c.data
	i++
	start := i
	for inPlace[d[i]] {
		i++
	}
	if d[i] == '"' {
		c.scalar('s', start, i, false)
		return i + 1
	}
	from, out := len(c.buf), c.buf
	for i = start; d[i] != '"'; {
		switch b := d[i]; {
		case b == '\\':
			r, n := unescape(d[i:])
			out, i = utf8.AppendRune(out, r), i+n
		case b < utf8.RuneSelf:
			out, i = append(out, b), i+1
		default:
			r, n := utf8.DecodeRune(d[i:])
			out, i = utf8.AppendRune(out, r), i+n // an invalid byte is U+FFFD
		}
	}
	c.buf = out
	c.scalar('s', from, len(out), true)
	return i + 1
}

// inPlace holds the bytes a string kept in place may hold.
var inPlace = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// unescape decodes the (valid) escape at the start of d, as encoding/json
// does (a lone surrogate is U+FFFD); n is its length.
func unescape(d []byte) (r rune, n int) {
	if k := strings.IndexByte(`"\/bfnrt`, d[1]); k >= 0 {
		return rune("\"\\/\b\f\n\r\t"[k]), 2
	}
	if r = hex4(d[2:]); !utf16.IsSurrogate(r) {
		return r, 6
	}
	if len(d) >= 12 && d[6] == '\\' && d[7] == 'u' {
		if dec := utf16.DecodeRune(r, hex4(d[8:])); dec != utf8.RuneError {
			return dec, 12
		}
	}
	return utf8.RuneError, 6
}

// hex4 reads the four hex digits of a \u escape.
func hex4(d []byte) rune {
	var b [2]byte
	_, _ = hex.Decode(b[:], d[:4])
	return rune(b[0])<<8 | rune(b[1])
}

// bytesOf returns the bytes of string or number node i.
func (c *canonicalizer) bytesOf(i int32) []byte {
	n := &c.nodes[i]
	if n.esc {
		return c.buf[n.start:n.end]
	}
	return c.data[n.start:n.end]
}

// emit writes node i and what it holds. path is its IgnoreJSONFields path,
// live whether an ignored path may lie below.
func (c *canonicalizer) emit(i int32, path string, live bool) {
	n := c.nodes[i]
	switch n.kind {
	case 'a':
		c.tag('a', int(n.count))
		p, l := path, live
		if live {
			p, l = c.ignore.below(c.path(path, nil))
		}
		for el := i + 1; el < n.next; el = c.nodes[el].next {
			c.emit(el, p, l)
		}
	case 'o':
		from := len(c.members)
		for k := i + 1; k < n.next; k = c.nodes[k+1].next {
			if !live || !c.ignore.matches(c.path(path, c.bytesOf(k))) {
				c.members = append(c.members, member{key: k, value: k + 1})
			}
		}
		ms := c.members[from:]
		c.tag(c.arrange(ms), len(ms))
		for _, m := range ms {
			key := c.bytesOf(m.key)
			c.tag('k', len(key))
			c.out = append(c.out, key...)
			p, l := path, live
			if live {
				p, l = c.ignore.below(c.path(path, key))
			}
			c.emit(m.value, p, l)
		}
		c.members = c.members[:from]
	case 's', 'n':
		b := c.bytesOf(i)
		c.tag(n.kind, len(b))
		c.out = append(c.out, b...)
	default:
		c.tag(n.kind, 0)
	}
}

func (c *canonicalizer) tag(t byte, n int) {
	c.out = binary.AppendUvarint(append(c.out, t), uint64(n))
}

// arrange orders the members of one object and returns its tag: sorted by
// key then document order ('o'), unless keys collide ('N', 'O').
func (c *canonicalizer) arrange(ms []member) (tag byte) {
	slices.SortFunc(ms, func(a, b member) int {
		if d := bytes.Compare(c.bytesOf(a.key), c.bytesOf(b.key)); d != 0 {
			return d
		}
		return cmp.Compare(a.key, b.key)
	})
	if len(ms) < 2 {
		return 'o'
	}
	plain, oddInts := c.scanKeys(ms)
	switch {
	case oddInts && c.collision(ms, true):
		return 'N'
	case !plain && c.collision(ms, false):
		return 'O'
	}
	return 'o'
}

// scanKeys tells what may collide: plain is false when a key has an
// upper-case or non-ASCII letter; oddInts is true when a key is an integer
// not written as strconv.Itoa would ("01", "+1", "-0").
func (c *canonicalizer) scanKeys(ms []member) (plain, oddInts bool) {
	plain = true
	for _, m := range ms {
		key := c.bytesOf(m.key)
		if plain && slices.ContainsFunc(key, func(b byte) bool { return b >= utf8.RuneSelf || (b >= 'A' && b <= 'Z') }) {
			plain = false
		}
		if !oddInts && len(key) > 1 {
			switch key[0] {
			case '+', '0':
				oddInts = allDigits(key[1:])
			case '-':
				oddInts = key[1] == '0' && allDigits(key[1:])
			}
		}
	}
	return plain, oddInts
}

func allDigits(b []byte) bool {
	return len(b) > 0 && !slices.ContainsFunc(b, func(d byte) bool { return d < '0' || d > '9' })
}

// folded is a member with its class, foldBuf[lo:hi].
type folded struct {
	lo, hi int32
	m      member
}

// collision reports whether two different keys decode to one field or map
// key (same class: the folding, or with ints an integer's value), and if so
// orders ms by class, then document order.
func (c *canonicalizer) collision(ms []member, ints bool) bool {
	c.foldBuf, c.folds = c.foldBuf[:0], c.folds[:0]
	for _, m := range ms {
		lo := len(c.foldBuf)
		if ints {
			c.foldBuf = appendClass(c.foldBuf, c.bytesOf(m.key))
		} else {
			c.foldBuf = appendFolded(c.foldBuf, c.bytesOf(m.key))
		}
		c.folds = append(c.folds, folded{lo: int32(lo), hi: int32(len(c.foldBuf)), m: m})
	}
	class := func(f folded) []byte { return c.foldBuf[f.lo:f.hi] }
	slices.SortFunc(c.folds, func(a, b folded) int {
		if d := bytes.Compare(class(a), class(b)); d != 0 {
			return d
		}
		return cmp.Compare(a.m.key, b.m.key)
	})
	for k := 1; k < len(c.folds); k++ {
		a, b := c.folds[k-1], c.folds[k]
		if bytes.Equal(class(a), class(b)) &&
			(!ints || c.foldBuf[a.lo] == classInt && !bytes.Equal(c.bytesOf(a.m.key), c.bytesOf(b.m.key))) {
			for j, f := range c.folds {
				ms[j] = f.m
			}
			return true
		}
	}
	return false
}

// The tags of the two kinds of class of appendClass.
const (
	classInt    = 0
	classFolded = 1
)

// appendClass appends the class of a key: for an integer a tag and its value
// in shortest form, for any other key another tag and its folding.
func appendClass(out, key []byte) []byte {
	digits, neg := key, false
	if len(digits) > 0 && (digits[0] == '+' || digits[0] == '-') {
		digits, neg = digits[1:], digits[0] == '-'
	}
	if !allDigits(digits) {
		return appendFolded(append(out, classFolded), key)
	}
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	out = append(out, classInt)
	if neg && digits[0] != '0' {
		out = append(out, '-')
	}
	return append(out, digits...)
}

// appendFolded appends the key folded as encoding/json folds names: ASCII
// letters to upper case, other runes to the smallest of their simple-fold
// orbit ("K", "k" and KELVIN SIGN fold alike).
func appendFolded(out, key []byte) []byte {
	for _, r := range string(key) {
		switch {
		case 'a' <= r && r <= 'z':
			r -= 'a' - 'A'
		case r >= utf8.RuneSelf:
			for f := unicode.SimpleFold(r); f > r; f = unicode.SimpleFold(f) {
				r = f
			}
			r = unicode.SimpleFold(r) // the orbit wraps to its smallest
		}
		out = utf8.AppendRune(out, r)
	}
	return out
}

// path is the IgnoreJSONFields path of a member key below parent (key nil:
// an array element), in c.scratch.
func (c *canonicalizer) path(parent string, key []byte) []byte {
	c.scratch = append(c.scratch[:0], parent...)
	if key == nil {
		return append(c.scratch, "[]"...)
	}
	if parent != "" {
		c.scratch = append(c.scratch, '.')
	}
	return append(c.scratch, key...)
}

// ignoreSet is the paths of IgnoreJSONFields, and every prefix of them.
type ignoreSet struct {
	paths    map[string]struct{}
	prefixes map[string]string // each prefix mapped to itself: a lookup yields a string without allocating
}

func newIgnoreSet(paths []string) *ignoreSet {
	s := &ignoreSet{paths: map[string]struct{}{}, prefixes: map[string]string{}}
	for _, p := range paths {
		s.paths[p] = struct{}{}
		for i := 0; i <= len(p); i++ {
			s.prefixes[p[:i]] = p[:i]
		}
	}
	return s
}

func (s *ignoreSet) matches(path []byte) bool {
	_, ok := s.paths[string(path)]
	return ok
}

// below returns path as a string and whether an ignored path may lie below.
func (s *ignoreSet) below(path []byte) (string, bool) {
	p, ok := s.prefixes[string(path)]
	return p, ok
}
