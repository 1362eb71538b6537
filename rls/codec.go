package rls

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// The proto codec, registered by its init, which codec falls back to.
	_ "google.golang.org/grpc/encoding/proto"
)

// codec is the gRPC server's codec: ShouldRateLimit's request and answer are read and written
// without protobuf's reflection-driven tables, every other message (health, reflection, any
// other service on the server) by the proto codec.
//
// Why hand-written: the pinned go-control-plane ships vtprotobuf's code for these messages
// only for marshalling and only behind the vtprotobuf build tag, and vtprotobuf generates
// methods into the messages' own package, so it cannot add an unmarshaller from here. The
// profile of BenchmarkRLS put the reflective unmarshal among dianad's larger costs, and its
// allocations (one per string, message and slice) among the rest.
//
// The fast paths cover what Envoy sends and what the service answers; a message outside them
// (an unknown field, a field of an unexpected wire type, a message field given twice, invalid
// UTF-8, a quota) goes to the proto codec whole, so that every message reads and writes as
// protobuf's own code reads and writes it (codec_test.go compares the two, also by fuzzing).
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*pb.RateLimitResponse); ok && fastResponse(r) {
		n := sizeResponse(r)
		if mem.IsBelowBufferPoolingThreshold(n) {
			return mem.BufferSlice{mem.SliceBuffer(appendResponse(make([]byte, 0, n), r))}, nil
		}
		pool := mem.DefaultBufferPool()
		buf := pool.Get(n)
		*buf = appendResponse((*buf)[:0], r)
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*pb.RateLimitRequest); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		done := readRequest(buf.ReadOnlyData(), r)
		buf.Free()
		if done {
			return nil
		}
		proto.Reset(r)
	}
	return c.proto.Unmarshal(data, v)
}

// readRequest reads b into the empty m and reports true, or reports false (m then holds
// partial fields) when b is not for the fast path. Its strings share one copy of b, and its
// descriptors and entries are allocated together.
func readRequest(b []byte, m *pb.RateLimitRequest) bool {
	descriptors, entries, ok := scanRequest(b)
	if !ok {
		return false
	}
	s := string(b)
	ds := make([]rlv3.RateLimitDescriptor, descriptors)
	es := make([]rlv3.RateLimitDescriptor_Entry, entries)
	eps := make([]*rlv3.RateLimitDescriptor_Entry, entries)
	for i := range es {
		eps[i] = &es[i]
	}
	if descriptors > 0 {
		m.Descriptors = make([]*rlv3.RateLimitDescriptor, 0, descriptors)
	}
	for off := 0; off < len(b); {
		num, _, n := protowire.ConsumeTag(b[off:])
		off += n
		if num == 3 {
			v, n := protowire.ConsumeVarint(b[off:])
			m.HitsAddend = uint32(v)
			off += n
			continue
		}
		v, n := protowire.ConsumeBytes(b[off:])
		start := off + n - len(v)
		off += n
		if num == 1 {
			m.Domain = s[start:off]
			continue
		}
		d := &ds[len(m.Descriptors)]
		m.Descriptors = append(m.Descriptors, d)
		if !readDescriptor(v, s[start:off], d, &eps) {
			return false
		}
	}
	return true
}

// scanRequest checks the fields of a request for the fast path, and counts its descriptors
// and their entries.
func scanRequest(b []byte) (descriptors, entries int, ok bool) {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return 0, 0, false
		}
		off += n
		switch {
		case num == 3 && typ == protowire.VarintType:
			n = protowire.ConsumeFieldValue(num, typ, b[off:])
		case (num == 1 || num == 2) && typ == protowire.BytesType:
			v, vn := protowire.ConsumeBytes(b[off:])
			n = vn
			if n < 0 {
				return 0, 0, false
			}
			if num == 1 && !utf8.Valid(v) {
				return 0, 0, false
			}
			if num == 2 {
				k, ok := scanDescriptor(v)
				if !ok {
					return 0, 0, false
				}
				descriptors++
				entries += k
			}
		default:
			return 0, 0, false
		}
		if n < 0 {
			return 0, 0, false
		}
		off += n
	}
	return descriptors, entries, true
}

// scanDescriptor checks the fields of a descriptor for the fast path, and counts its entries.
func scanDescriptor(b []byte) (entries int, ok bool) {
	var limit, hits bool
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || typ != protowire.BytesType {
			return 0, false
		}
		off += n
		switch num {
		case 1:
			entries++
		case 2, 3: // a message field given twice merges: left to the proto codec
			seen := &limit
			if num == 3 {
				seen = &hits
			}
			if *seen {
				return 0, false
			}
			*seen = true
		default:
			return 0, false
		}
		_, n = protowire.ConsumeBytes(b[off:])
		if n < 0 {
			return 0, false
		}
		off += n
	}
	return entries, true
}

// readDescriptor reads a descriptor (b, whose bytes s holds as a string), which scanDescriptor
// checked, into d, its entries from the front of *eps.
func readDescriptor(b []byte, s string, d *rlv3.RateLimitDescriptor, eps *[]*rlv3.RateLimitDescriptor_Entry) bool {
	first := *eps
	k := 0
	for off := 0; off < len(b); {
		num, _, n := protowire.ConsumeTag(b[off:])
		off += n
		v, n := protowire.ConsumeBytes(b[off:])
		start := off + n - len(v)
		off += n
		switch num {
		case 1:
			if !readEntry(v, s[start:off], first[k]) {
				return false
			}
			k++
		case 2:
			d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{}
			if !readOverride(v, d.Limit) {
				return false
			}
		case 3:
			d.HitsAddend = &wrapperspb.UInt64Value{}
			if !readUInt64Value(v, d.HitsAddend) {
				return false
			}
		}
	}
	if k > 0 {
		d.Entries = first[:k:k]
	}
	*eps = first[k:]
	return true
}

// readEntry reads an entry (b, whose bytes s holds) into e.
func readEntry(b []byte, s string, e *rlv3.RateLimitDescriptor_Entry) bool {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || typ != protowire.BytesType || num != 1 && num != 2 {
			return false
		}
		off += n
		v, n := protowire.ConsumeBytes(b[off:])
		if n < 0 || !utf8.Valid(v) {
			return false
		}
		str := s[off+n-len(v) : off+n]
		if num == 1 {
			e.Key = str
		} else {
			e.Value = str
		}
		off += n
	}
	return true
}

// readOverride reads a descriptor's limit override into o.
func readOverride(b []byte, o *rlv3.RateLimitDescriptor_RateLimitOverride) bool {
	return readVarints(b, 2, func(num protowire.Number, v uint64) {
		if num == 1 {
			o.RequestsPerUnit = uint32(v)
		} else {
			o.Unit = typev3.RateLimitUnit(int32(v))
		}
	})
}

// readUInt64Value reads a google.protobuf.UInt64Value into w.
func readUInt64Value(b []byte, w *wrapperspb.UInt64Value) bool {
	return readVarints(b, 1, func(_ protowire.Number, v uint64) { w.Value = v })
}

// readVarints reads a message whose fields are all varints numbered 1 to last, passing each
// to set; false for anything else, which the full codec then reads.
func readVarints(b []byte, last protowire.Number, set func(num protowire.Number, v uint64)) bool {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || typ != protowire.VarintType || num < 1 || num > last {
			return false
		}
		off += n
		v, n := protowire.ConsumeVarint(b[off:])
		if n < 0 {
			return false
		}
		off += n
		set(num, v)
	}
	return true
}

// fastResponse reports whether appendResponse writes r: everything the service answers but a
// quota (which Envoy's ratelimit.proto marks as work in progress), and no unknown fields.
func fastResponse(r *pb.RateLimitResponse) bool {
	if r.Quota != nil || len(r.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, st := range r.Statuses {
		if st == nil || st.Quota != nil || len(st.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		if l := st.CurrentLimit; l != nil && len(l.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		if d := st.DurationUntilReset; d != nil && len(d.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	for _, hs := range [][]*corev3.HeaderValue{r.ResponseHeadersToAdd, r.RequestHeadersToAdd} {
		for _, h := range hs {
			if h == nil || len(h.ProtoReflect().GetUnknown()) > 0 {
				return false
			}
		}
	}
	return true
}

// The field numbers of the answer's messages, as ratelimit.proto, base.proto and duration.proto
// number them.
const (
	respOverallCode, respStatuses, respResponseHeaders, respRequestHeaders, respRawBody, respDynamicMetadata = 1, 2, 3, 4, 5, 6
	statusCode, statusCurrentLimit, statusLimitRemaining, statusDurationUntilReset                           = 1, 2, 3, 4
	limitRequestsPerUnit, limitUnit, limitName                                                               = 1, 2, 3
	headerKey, headerValue, headerRawValue                                                                   = 1, 2, 3
	durationSeconds, durationNanos                                                                           = 1, 2
)

// sizeResponse is the size of r's encoding (fastResponse(r) holds).
func sizeResponse(r *pb.RateLimitResponse) int {
	n := sizeVarint(respOverallCode, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		n += sizeMessage(respStatuses, sizeStatus(st))
	}
	for _, h := range r.ResponseHeadersToAdd {
		n += sizeMessage(respResponseHeaders, sizeHeader(h))
	}
	for _, h := range r.RequestHeadersToAdd {
		n += sizeMessage(respRequestHeaders, sizeHeader(h))
	}
	n += sizeBytes(respRawBody, len(r.RawBody))
	if r.DynamicMetadata != nil {
		n += sizeMessage(respDynamicMetadata, proto.Size(r.DynamicMetadata))
	}
	return n
}

// appendResponse appends r's encoding to b, its fields in the order of their numbers, as
// protobuf's own code writes them.
func appendResponse(b []byte, r *pb.RateLimitResponse) []byte {
	b = appendVarint(b, respOverallCode, uint64(r.OverallCode))
	for _, st := range r.Statuses {
		b = appendLen(b, respStatuses, sizeStatus(st))
		b = appendStatus(b, st)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = appendLen(b, respResponseHeaders, sizeHeader(h))
		b = appendHeader(b, h)
	}
	for _, h := range r.RequestHeadersToAdd {
		b = appendLen(b, respRequestHeaders, sizeHeader(h))
		b = appendHeader(b, h)
	}
	b = appendBytes(b, respRawBody, r.RawBody)
	if r.DynamicMetadata != nil {
		b = appendLen(b, respDynamicMetadata, proto.Size(r.DynamicMetadata))
		b, _ = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, r.DynamicMetadata)
	}
	return b
}

func sizeStatus(st *pb.RateLimitResponse_DescriptorStatus) int {
	n := sizeVarint(statusCode, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		n += sizeMessage(statusCurrentLimit, sizeLimit(l))
	}
	n += sizeVarint(statusLimitRemaining, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		n += sizeMessage(statusDurationUntilReset, sizeVarint(durationSeconds, uint64(d.Seconds))+sizeVarint(durationNanos, uint64(int64(d.Nanos))))
	}
	return n
}

func appendStatus(b []byte, st *pb.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarint(b, statusCode, uint64(st.Code))
	if l := st.CurrentLimit; l != nil {
		b = appendLen(b, statusCurrentLimit, sizeLimit(l))
		b = appendVarint(b, limitRequestsPerUnit, uint64(l.RequestsPerUnit))
		b = appendVarint(b, limitUnit, uint64(l.Unit))
		b = appendString(b, limitName, l.Name)
	}
	b = appendVarint(b, statusLimitRemaining, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = appendLen(b, statusDurationUntilReset, sizeVarint(durationSeconds, uint64(d.Seconds))+sizeVarint(durationNanos, uint64(int64(d.Nanos))))
		b = appendVarint(b, durationSeconds, uint64(d.Seconds))
		b = appendVarint(b, durationNanos, uint64(int64(d.Nanos)))
	}
	return b
}

func sizeLimit(l *pb.RateLimitResponse_RateLimit) int {
	return sizeVarint(limitRequestsPerUnit, uint64(l.RequestsPerUnit)) + sizeVarint(limitUnit, uint64(l.Unit)) + sizeBytes(limitName, len(l.Name))
}

func sizeHeader(h *corev3.HeaderValue) int {
	return sizeBytes(headerKey, len(h.Key)) + sizeBytes(headerValue, len(h.Value)) + sizeBytes(headerRawValue, len(h.RawValue))
}

func appendHeader(b []byte, h *corev3.HeaderValue) []byte {
	b = appendString(b, headerKey, h.Key)
	b = appendString(b, headerValue, h.Value)
	return appendBytes(b, headerRawValue, h.RawValue)
}

// The helpers below write a proto3 field, and size it: a zero scalar or an empty string is
// not written.

func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func sizeBytes(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// sizeMessage is the size of a message field (written even when empty) of size n.
func sizeMessage(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// appendLen starts a message field of size n.
func appendLen(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}
