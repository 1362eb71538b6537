package rules

import "github.com/diana-gw/diana/shared/usage"

// The "body" dimension counts by a string field of the request's JSON body, body:PATH (object
// keys joined by '.'): the model of an LLM request, body:model. It reads the first MaxPeek bytes
// a front end peeks at (Input.Body; Reads.Body). A request without the field there counts by its
// client address, as with any dimension; a field given twice or longer than 256 bytes shares one
// identity with every such request (see usage.Fields.Text), so that a client cannot choose one.
func init() {
	RegisterDimension("body", DimensionKind{New: bodyDim, Reads: Reads{Body: true}, Arg: `[^.+]+(\.[^.+]+){0,15}`,
		Doc: "a string field of the request's JSON body, body:PATH (e.g. body:model), read from its first MiB"})
}

type bodyField struct{ f *usage.Fields }

func bodyDim(arg string) (Dimension, string) {
	if arg == "" {
		return nil, "needs a JSON path: body:PATH (e.g. body:model)"
	}
	f, err := usage.ParsePaths(arg)
	if err != nil {
		return nil, err.Error()
	}
	if f.Terms() != 1 {
		return nil, "names one field of the body, got " + quote(arg)
	}
	return bodyField{f}, ""
}

func (b bodyField) Value(in *Input) (string, bool) { return b.f.Text(in.Body) }
