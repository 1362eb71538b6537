package usage

import (
	"strings"

	"github.com/diana-gw/diana/shared/jsontok"
)

// maxPaths is the most paths one walker follows: a bit each in a mask.
const maxPaths = 64

// anyElement is the path segment of every element of an array: "candidates.[].finishReason".
const anyElement = "[]"

// walker follows the tokens of one JSON document and says, of each value, which of a few paths
// lead to it: a path is a list of object keys (or anyElement), a bit of a mask. Each open object
// or array holds the paths that continue inside it; a key narrows them to the paths its value
// continues or ends. A key on a path that an object holds twice is an error (ErrDuplicate): which
// of the two counts is the upstream's guess. Its memory is one frame per open container.
type walker struct {
	paths [][]string
	stack []frame
	// leaf and child are the paths the next value ends and continues.
	leaf, child uint64
}

type frame struct {
	obj  bool
	mask uint64 // the paths that continue inside the container
	seen uint64 // an object's: the paths whose key it has had
}

// reset prepares w for a document whose root is the next value.
func (w *walker) reset(paths [][]string) {
	w.paths, w.stack = paths, w.stack[:0]
	w.leaf, w.child = 0, all(len(paths))
}

func all(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// value is a value of a path walker.token found.
type value struct {
	leaf uint64 // the paths that end at it
	kind jsontok.Kind
}

// token follows the token k (text: a key's text, long: cut by the tokenizer). It returns the
// paths the token's value ends (0 for none, or for a token that is no value), or an error.
func (w *walker) token(k jsontok.Kind, text []byte, long bool) (uint64, error) {
	switch k {
	case jsontok.Key:
		return 0, w.key(text, long)
	case jsontok.EndObject, jsontok.EndArray:
		w.stack = w.stack[:len(w.stack)-1]
		w.leaf, w.child = 0, 0
		return 0, nil
	}
	leaf, child := w.leaf, w.child
	if n := len(w.stack); n > 0 && !w.stack[n-1].obj { // an array's element
		leaf, child = w.element(n - 1)
	}
	w.leaf, w.child = 0, 0
	switch k {
	case jsontok.BeginObject, jsontok.BeginArray:
		w.stack = append(w.stack, frame{obj: k == jsontok.BeginObject, mask: child})
	}
	return leaf, nil
}

// element returns the paths that the elements of the array at depth d end and continue.
func (w *walker) element(d int) (leaf, child uint64) {
	m := w.stack[d].mask
	for p := 0; m != 0; p++ {
		if m&1 != 0 {
			segs := w.paths[p]
			if segs[d] == anyElement {
				if len(segs) == d+1 {
					leaf |= 1 << p
				} else {
					child |= 1 << p
				}
			}
		}
		m >>= 1
	}
	return leaf, child
}

// key narrows the paths of the innermost object to those its key leads to.
func (w *walker) key(text []byte, long bool) error {
	d := len(w.stack) - 1
	top := &w.stack[d]
	w.leaf, w.child = 0, 0
	if top.mask == 0 || long {
		return nil
	}
	m := top.mask
	for p := 0; m != 0; p++ {
		if m&1 != 0 {
			segs := w.paths[p]
			if segs[d] == string(text) {
				if len(segs) == d+1 {
					w.leaf |= 1 << p
				} else {
					w.child |= 1 << p
				}
			}
		}
		m >>= 1
	}
	if k := w.leaf | w.child; top.seen&k != 0 {
		return wrap(ErrDuplicate, "a key on the path "+w.name(k)+" appears twice in one object")
	}
	top.seen |= w.leaf | w.child
	return nil
}

// name names the first path of mask m.
func (w *walker) name(m uint64) string {
	for p := range w.paths {
		if m&(1<<p) != 0 {
			return strings.Join(w.paths[p], ".")
		}
	}
	return "?"
}
