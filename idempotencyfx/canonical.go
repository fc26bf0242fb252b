package idempotencyfx

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxJSONDepth is the deepest nesting of arrays and objects that a JSON
// body may have to be fingerprinted: encoding/json's own limit, so no body
// that a handler could decode with it is refused. A JSON body nested deeper
// gets 400 idempotency_body_too_deep before any Redis call.
const MaxJSONDepth = 10000

var (
	errNotJSON = errors.New("not JSON")
	errTooDeep = errors.New("idempotencyfx: JSON nested deeper than MaxJSONDepth")
)

// The canonical form of a JSON document is a tagged, length-prefixed
// serialisation: 'a' + element count then the elements; 'o' + member count
// then, per member sorted by key, 'k' + key and the value; 's' + string;
// 'n' + number text; 't', 'f', 'z' for true, false, null. Counts and lengths
// are uvarints. It matches what encoding/json decodes: invalid UTF-8 becomes
// U+FFFD, "\u0041" is "A". Duplicate keys all count, in document order:
// encoding/json does not simply keep the last (a null leaves a string field
// as it was, repeated objects merge into a struct).
//
// An object with two keys that are equal under case folding ("amount" and
// "Amount") is tagged 'O' and keeps the document order of those keys:
// encoding/json matches struct fields case-insensitively and the last
// matching key wins, so their order changes what a handler decodes. An
// object with two different keys that are the same integer ("1" and "01",
// "+1", "-0" and "0") is tagged 'N' and keeps the document order of those
// keys, and of keys equal under case folding: encoding/json decodes them
// into one key of a map with an integer key type, and the last one wins.
// Only objects with such keys have these tags, so the canonical form of
// any other is what it was before the rule.
//
// The work is linear in the size of the body (plus sorting the keys of each
// object): one pass parses the document into a flat list of nodes, a second
// writes it from that list. Neither recurses, so depth costs no stack.

// node is one value of the parsed document, in document order. The children
// of a container follow it; an object's are key, value, key, value...
type node struct {
	start, end int32 // a string's bytes (in data, or in buf when esc) or a number's text
	next       int32 // the index after this node and its descendants
	count      int32 // elements of an array, members of an object
	kind       byte  // 'o' 'a' 's' 'n' 't' 'f' 'z'
	esc        bool  // the string had escapes (or invalid UTF-8) and was decoded into buf
}

// nodes is the parsed document, in chunks: appending never moves a node
// (pointers to one stay valid) and a large document is never copied to grow.
type nodes struct {
	chunks [][]node
	n      int32
}

const chunkBits = 10 // 1,024 nodes (20 KiB) per chunk

func (t *nodes) add(nd node) int32 {
	i := t.n
	if int(i>>chunkBits) == len(t.chunks) {
		t.chunks = append(t.chunks, make([]node, 1<<chunkBits))
	}
	t.chunks[i>>chunkBits][i&(1<<chunkBits-1)] = nd
	t.n++
	return i
}

func (t *nodes) at(i int32) *node { return &t.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// reset empties t, keeping a few chunks for the next (ordinary) document.
func (t *nodes) reset() {
	t.n = 0
	if len(t.chunks) > 4 {
		clear(t.chunks[4:])
		t.chunks = t.chunks[:4]
	}
}

// member is one member of an object being written.
type member struct {
	key   int32 // node index of the key
	value int32 // node index of the value
	order int32 // position in the object
}

// frame is a container being written.
type frame struct {
	node     int32 // the container
	next     int32 // arrays: node index of the next element
	left     int32 // arrays: elements left
	pos, end int   // objects: its members are members[pos:end] (pos: the next to write)
	from     int   // objects: where its members start, to drop them when done
	path     string
	live     bool // an ignored path may lie below path
}

// folded is a member with its case-folded key (foldBuf[lo:hi]), to order
// colliding keys.
type folded struct {
	lo, hi int32
	m      member
}

type canonicalizer struct {
	data    []byte
	w       io.Writer
	ignore  *ignoreSet
	nodes   nodes
	buf     []byte  // decoded strings
	stack   []int32 // open containers while parsing
	members []member
	frames  []frame
	folds   []folded
	foldBuf []byte
	scratch []byte // paths being looked up
	out     []byte // output not yet written to w
}

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

// keepCap is the capacity up to which a pooled canonicalizer keeps its
// buffers: ordinary bodies reuse them, a hostile one does not pin memory.
const keepCap = 1 << 14

// canonical writes the canonical form of data to w. It returns errNotJSON
// when data is not exactly one JSON document and errTooDeep when it nests
// deeper than MaxJSONDepth; nothing is written to w then.
func canonical(w io.Writer, data []byte, ignore *ignoreSet) error {
	if len(data) > math.MaxInt32 {
		return errNotJSON
	}
	c, ok := canonicalizers.Get().(*canonicalizer)
	if !ok {
		c = new(canonicalizer)
	}
	defer c.release()
	c.data, c.w, c.ignore = data, w, ignore
	if err := c.parse(); err != nil {
		return err
	}
	c.write()
	return nil
}

func (c *canonicalizer) release() {
	c.data, c.w, c.ignore = nil, nil, nil
	c.nodes.reset()
	c.buf, c.stack = trim(c.buf), trim(c.stack)
	c.members, c.frames, c.folds = trim(c.members), trim(c.frames), trim(c.folds)
	c.foldBuf, c.scratch, c.out = trim(c.foldBuf), trim(c.scratch), trim(c.out)
	canonicalizers.Put(c)
}

// trim empties a buffer for reuse. None holds a pointer into the body.
func trim[T any](s []T) []T {
	if cap(s) > keepCap {
		return nil
	}
	return s[:0]
}

// parse reads the document into c.nodes.
func (c *canonicalizer) parse() error {
	d := c.data
	i := c.ws(0)
	for {
		// A value starts at i.
		if i >= len(d) {
			return errNotJSON
		}
		var err error
		switch b := d[i]; {
		case b == '{' || b == '[':
			if len(c.stack) == MaxJSONDepth {
				return errTooDeep
			}
			kind, closer := byte('a'), byte(']')
			if b == '{' {
				kind, closer = 'o', '}'
			}
			c.stack = append(c.stack, c.nodes.add(node{kind: kind}))
			if i = c.ws(i + 1); i < len(d) && d[i] == closer {
				i++
				c.closeContainer()
				break // an empty container is a complete value
			}
			if kind == 'o' {
				if i, err = c.key(i); err != nil {
					return err
				}
			}
			continue // its first value
		case b == '"':
			i, err = c.str(i)
		case b == 't':
			i, err = c.literal(i, "true", 't')
		case b == 'f':
			i, err = c.literal(i, "false", 'f')
		case b == 'n':
			i, err = c.literal(i, "null", 'z')
		case b == '-' || (b >= '0' && b <= '9'):
			i, err = c.number(i)
		default:
			return errNotJSON
		}
		if err != nil {
			return err
		}
		// A value ends at i: it may be the last of its containers.
		for {
			if len(c.stack) == 0 {
				if c.ws(i) != len(d) {
					return errNotJSON
				}
				return nil
			}
			top := c.nodes.at(c.stack[len(c.stack)-1])
			top.count++
			if i = c.ws(i); i >= len(d) {
				return errNotJSON
			}
			if d[i] == ',' {
				i = c.ws(i + 1)
				if top.kind == 'o' {
					if i, err = c.key(i); err != nil {
						return err
					}
				}
				break // the next value
			}
			if (top.kind == 'a' && d[i] != ']') || (top.kind == 'o' && d[i] != '}') {
				return errNotJSON
			}
			i++
			c.closeContainer()
		}
	}
}

func (c *canonicalizer) closeContainer() {
	top := c.stack[len(c.stack)-1]
	c.stack = c.stack[:len(c.stack)-1]
	c.nodes.at(top).next = c.nodes.n
}

func (c *canonicalizer) ws(i int) int {
	for i < len(c.data) {
		switch c.data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// key reads an object key and its colon; it returns the start of the value.
func (c *canonicalizer) key(i int) (int, error) {
	if i >= len(c.data) || c.data[i] != '"' {
		return 0, errNotJSON
	}
	i, err := c.str(i)
	if err != nil {
		return 0, err
	}
	if i = c.ws(i); i >= len(c.data) || c.data[i] != ':' {
		return 0, errNotJSON
	}
	return c.ws(i + 1), nil
}

func (c *canonicalizer) scalar(kind byte, start, end int, esc bool) {
	c.nodes.add(node{kind: kind, start: int32(start), end: int32(end), next: c.nodes.n + 1, esc: esc})
}

func (c *canonicalizer) literal(i int, lit string, kind byte) (int, error) {
	if !bytes.HasPrefix(c.data[i:], []byte(lit)) {
		return 0, errNotJSON
	}
	c.scalar(kind, 0, 0, false)
	return i + len(lit), nil
}

// number checks the JSON number grammar; the text is kept as it is.
func (c *canonicalizer) number(start int) (int, error) {
	d, i := c.data, start
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		return 0, errNotJSON
	}
	if i < len(d) && d[i] == '.' {
		if j := digits(d, i+1); j > i+1 {
			i = j
		} else {
			return 0, errNotJSON
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return 0, errNotJSON
		}
		i = j
	}
	c.scalar('n', start, i, false)
	return i, nil
}

func digits(d []byte, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

// str reads the string at i (which is '"'). A string without escapes that is
// valid ASCII is kept in place; any other is decoded into buf.
func (c *canonicalizer) str(i int) (int, error) {
	d := c.data
	i++
	start := i
	for i < len(d) && inPlace[d[i]] { // one table load per byte, not four comparisons
		i++
	}
	switch {
	case i == len(d):
		return 0, errNotJSON
	case d[i] == '"':
		c.scalar('s', start, i, false)
		return i + 1, nil
	}
	return c.strSlow(start) // an escape, a control character or non-ASCII
}

// inPlace holds the bytes a string kept in place may hold: printable ASCII
// but the quote and the backslash.
var inPlace = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

func (c *canonicalizer) strSlow(start int) (int, error) {
	d := c.data
	from := len(c.buf)
	out := c.buf
	for i := start; i < len(d); {
		b := d[i]
		switch {
		case b == '"':
			c.buf = out
			c.scalar('s', from, len(out), true)
			return i + 1, nil
		case b < 0x20:
			return 0, errNotJSON
		case b == '\\':
			if i+1 >= len(d) {
				return 0, errNotJSON
			}
			switch e := d[i+1]; e {
			case '"', '\\', '/':
				out, i = append(out, e), i+2
			case 'b':
				out, i = append(out, '\b'), i+2
			case 'f':
				out, i = append(out, '\f'), i+2
			case 'n':
				out, i = append(out, '\n'), i+2
			case 'r':
				out, i = append(out, '\r'), i+2
			case 't':
				out, i = append(out, '\t'), i+2
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return 0, errNotJSON
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok2 := rune(-1), false
					if i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' {
						r2, ok2 = hex4(d, i+2)
					}
					if dec := utf16.DecodeRune(r, r2); ok2 && dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return 0, errNotJSON
			}
		case b < utf8.RuneSelf:
			out = append(out, b)
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, d[i:i+size]...)
			}
			i += size
		}
	}
	return 0, errNotJSON
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, b := range d[i : i+4] {
		switch {
		case b >= '0' && b <= '9':
			r = r<<4 | rune(b-'0')
		case b >= 'a' && b <= 'f':
			r = r<<4 | rune(b-'a'+10)
		case b >= 'A' && b <= 'F':
			r = r<<4 | rune(b-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// bytesOf returns the bytes of a string or number node.
func (c *canonicalizer) bytesOf(n *node) []byte {
	if n.esc {
		return c.buf[n.start:n.end]
	}
	return c.data[n.start:n.end]
}

func (c *canonicalizer) keyOf(m member) []byte { return c.bytesOf(c.nodes.at(m.key)) }

// write writes the parsed document to w.
func (c *canonicalizer) write() {
	c.emit(0, "", c.ignore != nil)
	for len(c.frames) > 0 {
		f := &c.frames[len(c.frames)-1]
		path, live := f.path, f.live
		if c.nodes.at(f.node).kind == 'a' {
			if f.left == 0 {
				c.frames = c.frames[:len(c.frames)-1]
				continue
			}
			el := f.next
			f.next, f.left = c.nodes.at(el).next, f.left-1
			if live {
				path, live = c.ignore.below(c.path(path, nil))
			}
			c.emit(el, path, live) // may grow c.frames: f is not used after this
			continue
		}
		if f.pos == f.end {
			c.members = c.members[:f.from]
			c.frames = c.frames[:len(c.frames)-1]
			continue
		}
		m := c.members[f.pos]
		f.pos++
		key := c.keyOf(m)
		c.tag('k', len(key))
		c.put(key)
		if live {
			path, live = c.ignore.below(c.path(path, key))
		}
		c.emit(m.value, path, live)
	}
	if len(c.out) > 0 {
		_, _ = c.w.Write(c.out)
		c.out = c.out[:0]
	}
}

// emit writes node i, or the head of a container (whose content follows
// through a new frame). path is its path for IgnoreJSONFields.
func (c *canonicalizer) emit(i int32, path string, live bool) {
	n := c.nodes.at(i)
	switch n.kind {
	case 'a':
		c.tag('a', int(n.count))
		if n.count > 0 {
			c.frames = append(c.frames, frame{node: i, next: i + 1, left: n.count, path: path, live: live})
		}
	case 'o':
		from := len(c.members)
		k := i + 1
		for j := int32(0); j < n.count; j++ {
			c.members = append(c.members, member{key: k, value: k + 1, order: j})
			k = c.nodes.at(k + 1).next
		}
		tag := c.arrange(from, path, live)
		c.tag(tag, len(c.members)-from)
		if len(c.members) == from {
			return
		}
		c.frames = append(c.frames, frame{node: i, pos: from, end: len(c.members), from: from, path: path, live: live})
	case 's', 'n':
		b := c.bytesOf(n)
		c.tag(n.kind, len(b))
		c.put(b)
	default:
		c.tag(n.kind, 0)
	}
}

// arrange puts the members of one object, c.members[from:], in canonical
// order: ignored ones dropped, sorted by key and then document order (every
// duplicate kept), or by folded key and then document order when two keys
// collide under case folding (tag 'O'), or by class (see collision) and
// then document order when two keys are the same integer (tag 'N').
func (c *canonicalizer) arrange(from int, path string, live bool) (tag byte) {
	ms := c.members[from:]
	if live {
		kept := ms[:0]
		for _, m := range ms {
			if !c.ignore.matches(c.path(path, c.keyOf(m))) {
				kept = append(kept, m)
			}
		}
		ms = kept
	}
	slices.SortFunc(ms, func(a, b member) int {
		if d := bytes.Compare(c.keyOf(a), c.keyOf(b)); d != 0 {
			return d
		}
		return cmp.Compare(a.order, b.order)
	})
	c.members = c.members[:from+len(ms)]
	if len(ms) < 2 {
		return 'o'
	}
	plain, oddInts := c.scanKeys(ms)
	switch {
	case oddInts && c.collision(ms, true):
		tag = 'N'
	case !plain && c.collision(ms, false):
		tag = 'O'
	default:
		return 'o'
	}
	for k, f := range c.folds {
		ms[k] = f.m
	}
	return tag
}

// scanKeys looks at the keys of one object for what may collide: plain is
// false when a key has an upper-case ASCII letter or a non-ASCII rune (it
// may fold onto another key); oddInts is true when a key is an integer not
// written as strconv.Itoa would write it ("01", "+1", "-0"), the only way
// two different keys can decode to the same integer map key. Most keys
// cost one byte's look for oddInts.
func (c *canonicalizer) scanKeys(ms []member) (plain, oddInts bool) {
	plain = true // lower-case ASCII keys fold to distinct keys
	for _, m := range ms {
		key := c.keyOf(m)
		if plain {
			for _, b := range key {
				if b >= utf8.RuneSelf || (b >= 'A' && b <= 'Z') {
					plain = false
					break
				}
			}
		}
		if !oddInts && len(key) > 1 {
			switch key[0] {
			case '+', '0':
				oddInts = allDigits(key[1:])
			case '-':
				oddInts = key[1] == '0' && allDigits(key[1:])
			}
		}
		if !plain && oddInts {
			break
		}
	}
	return plain, oddInts
}

func allDigits(b []byte) bool {
	return len(b) > 0 && digits(b, 0) == len(b)
}

// collision reports whether two different keys of the object decode to the
// same field or map key, and if so leaves in c.folds the members ordered by
// their class, then document order: the document order of the keys of one
// class is kept, that of different classes is not.
//
// Without ints the class of a key is its case folding (encoding/json
// matches struct fields case-insensitively, the last matching key wins);
// duplicates alone also count here, as they always have (their order is
// kept either way). With ints, a key that is an integer ([+-]digits) is of
// the class of its value, as encoding/json decodes it into a map with an
// integer key type (strconv.ParseInt or ParseUint: "1", "01", "+1" and
// "001" are one key, "-0" is "0"), any other key of its folding; only two
// integer keys written differently count as a collision. The integer
// classes are tagged apart from the folded ones, and a folded key is never
// an integer (folding changes letters only), so no integer key shares a
// class with a key that is not one.
func (c *canonicalizer) collision(ms []member, ints bool) bool {
	c.foldBuf, c.folds = c.foldBuf[:0], c.folds[:0]
	for _, m := range ms {
		lo := len(c.foldBuf)
		if ints {
			c.foldBuf = appendClass(c.foldBuf, c.keyOf(m))
		} else {
			c.foldBuf = appendFolded(c.foldBuf, c.keyOf(m))
		}
		c.folds = append(c.folds, folded{lo: int32(lo), hi: int32(len(c.foldBuf)), m: m})
	}
	key := func(f folded) []byte { return c.foldBuf[f.lo:f.hi] }
	slices.SortFunc(c.folds, func(a, b folded) int {
		if d := bytes.Compare(key(a), key(b)); d != 0 {
			return d
		}
		return cmp.Compare(a.m.order, b.m.order)
	})
	for k := 1; k < len(c.folds); k++ {
		a, b := c.folds[k-1], c.folds[k]
		if !bytes.Equal(key(a), key(b)) {
			continue
		}
		if !ints || (c.foldBuf[a.lo] == classInt && !bytes.Equal(c.keyOf(a.m), c.keyOf(b.m))) {
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

// appendClass appends the class of a key: for an integer ([+-]digits) a
// tag and its value in shortest form ("-" only if below zero), for any
// other key another tag and its folding.
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

// appendFolded appends the case-folded key, as encoding/json folds names:
// ASCII letters to upper case, other runes to the smallest rune of their
// simple-fold orbit (so "K", "k" and KELVIN SIGN fold alike).
func appendFolded(out, key []byte) []byte {
	for i := 0; i < len(key); {
		if b := key[i]; b < utf8.RuneSelf {
			if 'a' <= b && b <= 'z' {
				b -= 'a' - 'A'
			}
			out = append(out, b)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
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
	c.scratch = append(c.scratch, key...)
	return c.scratch
}

func (c *canonicalizer) tag(t byte, n int) {
	if len(c.out) > 32<<10 {
		_, _ = c.w.Write(c.out)
		c.out = c.out[:0]
	}
	c.out = append(c.out, t)
	c.out = binary.AppendUvarint(c.out, uint64(n))
}

// put adds b to the output, which goes to w in pieces of about 32 KiB.
func (c *canonicalizer) put(b []byte) {
	if len(c.out)+len(b) > 32<<10 {
		_, _ = c.w.Write(c.out)
		c.out = c.out[:0]
		if len(b) > 32<<10 {
			_, _ = c.w.Write(b)
			return
		}
	}
	c.out = append(c.out, b...)
}

// ignoreSet is the paths of IgnoreJSONFields, with every prefix of them, so
// that a walk can tell at once whether an ignored path may lie below.
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

// below returns path as a string and whether an ignored path may lie at or
// below it.
func (s *ignoreSet) below(path []byte) (string, bool) {
	p, ok := s.prefixes[string(path)]
	return p, ok
}
