package idempotencyfx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sort"
	"unicode/utf16"
	"unicode/utf8"
)

// canonicalizer writes the canonical form of one JSON document straight
// from its bytes: no map[string]any, no interface boxing. The form is a
// tagged, length-prefixed serialisation (see canonicalWriter) with object
// members sorted by key; it matches what encoding/json would decode (last
// duplicate key wins, invalid UTF-8 becomes U+FFFD, depth limited to 10000).
type canonicalizer struct {
	data   []byte
	w      io.Writer
	ignore map[string]struct{}
	n      [binary.MaxVarintLen64 + 1]byte
	depth  int
}

var errNotJSON = errors.New("not JSON")

const maxDepth = 10000

// canonical writes the canonical form of data to w, or reports that data
// is not exactly one JSON document (nothing useful is written then).
func canonical(w io.Writer, data []byte, ignore map[string]struct{}) bool {
	c := canonicalizer{data: data, w: w, ignore: ignore}
	i := c.ws(0)
	end, err := c.value(i, "", true)
	if err != nil {
		return false
	}
	return c.ws(end) == len(data)
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

func (c *canonicalizer) tag(t byte, n int) {
	c.n[0] = t
	k := binary.PutUvarint(c.n[1:], uint64(n))
	_, _ = c.w.Write(c.n[:1+k])
}

// value parses the value at i, writing it when emit is set, and returns the
// index after it.
func (c *canonicalizer) value(i int, path string, emit bool) (int, error) {
	if i >= len(c.data) {
		return 0, errNotJSON
	}
	switch b := c.data[i]; {
	case b == '{':
		return c.object(i, path, emit)
	case b == '[':
		return c.array(i, path, emit)
	case b == '"':
		s, end, err := c.str(i)
		if err != nil {
			return 0, err
		}
		if emit {
			c.tag('s', len(s))
			_, _ = c.w.Write(s)
		}
		return end, nil
	case b == 't':
		return c.literal(i, "true", 't', emit)
	case b == 'f':
		return c.literal(i, "false", 'f', emit)
	case b == 'n':
		return c.literal(i, "null", 'z', emit)
	case b == '-' || (b >= '0' && b <= '9'):
		end, err := c.number(i)
		if err != nil {
			return 0, err
		}
		if emit {
			c.tag('n', end-i)
			_, _ = c.w.Write(c.data[i:end])
		}
		return end, nil
	}
	return 0, errNotJSON
}

func (c *canonicalizer) literal(i int, lit string, t byte, emit bool) (int, error) {
	if !bytes.HasPrefix(c.data[i:], []byte(lit)) {
		return 0, errNotJSON
	}
	if emit {
		c.tag(t, 0)
	}
	return i + len(lit), nil
}

// number checks the JSON number grammar.
func (c *canonicalizer) number(i int) (int, error) {
	d := c.data
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return 0, errNotJSON
	}
	if i < len(d) && d[i] == '.' {
		i++
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == start {
			return 0, errNotJSON
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == start {
			return 0, errNotJSON
		}
	}
	return i, nil
}

// str decodes the string at i (which is '"'); the result aliases data when
// the string has no escapes and is valid UTF-8.
func (c *canonicalizer) str(i int) ([]byte, int, error) {
	d := c.data
	i++
	start := i
	for i < len(d) {
		b := d[i]
		if b == '"' {
			return d[start:i], i + 1, nil
		}
		if b == '\\' || b < 0x20 || b >= utf8.RuneSelf {
			return c.strSlow(start)
		}
		i++
	}
	return nil, 0, errNotJSON
}

func (c *canonicalizer) strSlow(start int) ([]byte, int, error) {
	d := c.data
	out := make([]byte, 0, 32)
	for i := start; i < len(d); {
		b := d[i]
		switch {
		case b == '"':
			return out, i + 1, nil
		case b < 0x20:
			return nil, 0, errNotJSON
		case b == '\\':
			if i+1 >= len(d) {
				return nil, 0, errNotJSON
			}
			switch e := d[i+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
				i += 2
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
					return nil, 0, errNotJSON
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
				return nil, 0, errNotJSON
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
	return nil, 0, errNotJSON
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

func (c *canonicalizer) array(i int, path string, emit bool) (int, error) {
	if c.depth++; c.depth > maxDepth {
		return 0, errNotJSON
	}
	defer func() { c.depth-- }()
	i = c.ws(i + 1)
	// Count first (emit needs the length before the elements).
	count, end, err := c.count(i, ']')
	if err != nil {
		return 0, err
	}
	if !emit {
		return end, nil
	}
	c.tag('a', count)
	for k := 0; k < count; k++ {
		i = c.ws(i)
		if i, err = c.value(i, path+"[]", true); err != nil {
			return 0, err
		}
		i = c.ws(i)
		if i < len(c.data) && c.data[i] == ',' {
			i++
		}
	}
	return end, nil
}

// count scans the elements of an array starting at i (after '[' and
// whitespace) and returns their number and the index after ']'.
func (c *canonicalizer) count(i int, closer byte) (int, int, error) {
	if i < len(c.data) && c.data[i] == closer {
		return 0, i + 1, nil
	}
	n := 0
	for {
		var err error
		if i, err = c.value(c.ws(i), "", false); err != nil {
			return 0, 0, err
		}
		n++
		i = c.ws(i)
		if i >= len(c.data) {
			return 0, 0, errNotJSON
		}
		switch c.data[i] {
		case ',':
			i++
		case closer:
			return n, i + 1, nil
		default:
			return 0, 0, errNotJSON
		}
	}
}

type member struct {
	key   []byte
	value int // index of the value
	order int
}

func (c *canonicalizer) object(i int, path string, emit bool) (int, error) {
	if c.depth++; c.depth > maxDepth {
		return 0, errNotJSON
	}
	defer func() { c.depth-- }()
	i = c.ws(i + 1)
	var members []member
	if i < len(c.data) && c.data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(c.data) || c.data[i] != '"' {
				return 0, errNotJSON
			}
			key, end, err := c.str(i)
			if err != nil {
				return 0, err
			}
			i = c.ws(end)
			if i >= len(c.data) || c.data[i] != ':' {
				return 0, errNotJSON
			}
			i = c.ws(i + 1)
			start := i
			if i, err = c.value(i, "", false); err != nil {
				return 0, err
			}
			if emit {
				members = append(members, member{key: key, value: start, order: len(members)})
			}
			i = c.ws(i)
			if i >= len(c.data) {
				return 0, errNotJSON
			}
			if c.data[i] == '}' {
				i++
				break
			}
			if c.data[i] != ',' {
				return 0, errNotJSON
			}
			i = c.ws(i + 1)
		}
	}
	if !emit {
		return i, nil
	}
	// Sort by key; of duplicate keys the last one wins, as in encoding/json.
	sort.SliceStable(members, func(a, b int) bool { return bytes.Compare(members[a].key, members[b].key) < 0 })
	kept := members[:0]
	for k, m := range members {
		if k+1 < len(members) && bytes.Equal(members[k+1].key, m.key) {
			continue
		}
		if c.ignore != nil {
			if _, skip := c.ignore[join(path, string(m.key))]; skip {
				continue
			}
		}
		kept = append(kept, m)
	}
	c.tag('o', len(kept))
	for _, m := range kept {
		c.tag('k', len(m.key))
		_, _ = c.w.Write(m.key)
		sub := ""
		if c.ignore != nil {
			sub = join(path, string(m.key))
		}
		if _, err := c.value(m.value, sub, true); err != nil {
			return 0, err
		}
	}
	return i, nil
}
