package rls

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func entry(k, v string) *rlv3.RateLimitDescriptor_Entry {
	return &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v}
}

// codecRequests are requests of every shape the fast path reads.
var codecRequests = map[string]*pb.RateLimitRequest{
	"empty":       {},
	"domain only": {Domain: "edge"},
	"two descriptors": {Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("remote_address", "10.0.0.1")}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("remote_address", "10.0.0.1"), entry("path", "/api/items/3")}},
	}},
	"override and hits": {Domain: "d", HitsAddend: 7, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("k", "")},
			Limit:      &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_MINUTE},
			HitsAddend: wrapperspb.UInt64(1 << 40)},
		{HitsAddend: wrapperspb.UInt64(0), Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{}},
		{},
	}},
	"unicode and an empty entry": {Domain: "dömäin", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{}, entry("ключ", "值 ✓"), entry("", "v")}},
	}},
	"a unit beyond the enum's": {Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("k", "v")}, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: -3}},
	}},
}

func TestCodecReadsRequests(t *testing.T) {
	c := newCodec()
	for name, want := range codecRequests {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if !readRequest(b, &pb.RateLimitRequest{}) {
				t.Fatal("not read by the fast path")
			}
			got := &pb.RateLimitRequest{}
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("read %v, want %v", got, want)
			}
		})
	}
}

// TestCodecLeavesOthersToProto: a request the fast path does not take reads as the proto codec
// reads it (unknown fields kept, message fields merged, invalid UTF-8 refused), and so do
// messages of other types.
func TestCodecLeavesOthersToProto(t *testing.T) {
	base, _ := proto.Marshal(codecRequests["two descriptors"])
	desc := func(fields ...[]byte) []byte {
		var d []byte
		for _, f := range fields {
			d = append(d, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), d)
	}
	bytesField := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	override := func(rpu uint64) []byte {
		return bytesField(2, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), rpu))
	}
	cases := map[string][]byte{
		"unknown top-level field":   protowire.AppendVarint(protowire.AppendTag(append([]byte{}, base...), 9, protowire.VarintType), 1),
		"unknown descriptor field":  desc(protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 1)),
		"unknown entry field":       desc(bytesField(1, bytesField(3, []byte("x")))),
		"override given twice":      desc(override(5), override(6)),
		"hits_addend as bytes":      append(append([]byte{}, base...), bytesField(3, []byte{1})...),
		"domain not UTF-8":          bytesField(1, []byte{0xff, 0xfe}),
		"entry value not UTF-8":     desc(bytesField(1, bytesField(2, []byte{0xc3}))),
		"truncated":                 base[:len(base)-3],
		"field number 0":            {0x02, 0x00},
		"override unit as bytes":    desc(bytesField(2, bytesField(2, []byte{1}))),
		"hits wrapper unknown type": desc(bytesField(3, bytesField(1, []byte{1}))),
	}
	c := newCodec()
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if readRequest(b, &pb.RateLimitRequest{}) {
				t.Fatal("read by the fast path")
			}
			sameAsProto(t, c, b)
		})
	}
	t.Run("another message type", func(t *testing.T) {
		want := &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}}
		b, _ := proto.Marshal(want)
		got := &structpb.Struct{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil || !proto.Equal(got, want) {
			t.Fatalf("read %v, %v; want %v", got, err, want)
		}
		data, err := c.Marshal(want)
		if err != nil || string(data.Materialize()) != string(b) {
			t.Fatalf("wrote %x, %v; want %x", data.Materialize(), err, b)
		}
	})
}

// sameAsProto checks that the codec reads b as proto.Unmarshal does.
func sameAsProto(t *testing.T, c codec, b []byte) {
	t.Helper()
	want := &pb.RateLimitRequest{}
	wantErr := proto.Unmarshal(b, want)
	got := &pb.RateLimitRequest{}
	err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("codec: %v; proto: %v", err, wantErr)
	}
	if err == nil && !proto.Equal(got, want) {
		t.Fatalf("codec read %v; proto %v", got, want)
	}
}

func FuzzCodecReadsAsProto(f *testing.F) {
	for _, r := range codecRequests {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	c := newCodec()
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProto(t, c, b) })
}

// codecResponses are answers of every shape the service gives, and some it does not.
var codecResponses = map[string]*pb.RateLimitResponse{
	"empty": {},
	"two statuses": {OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
		{Code: pb.RateLimitResponse_OK, CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 4_000_000_000, Unit: pb.RateLimitResponse_RateLimit_HOUR},
			LimitRemaining: 3_999_999_000, DurationUntilReset: &durationpb.Duration{Seconds: 1234}},
		{Code: pb.RateLimitResponse_OK},
	}},
	"over, headers and metadata": {OverallCode: pb.RateLimitResponse_OVER_LIMIT,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{
			{Code: pb.RateLimitResponse_OVER_LIMIT, CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: "named", RequestsPerUnit: 0, Unit: pb.RateLimitResponse_RateLimit_WEEK},
				DurationUntilReset: &durationpb.Duration{}},
			{LimitRemaining: 1<<32 - 1},
		},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: HeaderLimit, Value: "10"}, {Key: HeaderRemaining, Value: "0"}, {Key: "raw", RawValue: []byte{0, 1}}},
		RequestHeadersToAdd:  []*corev3.HeaderValue{{}},
		RawBody:              []byte("body"),
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"domain": structpb.NewStringValue("d"), "n": structpb.NewNumberValue(3)}},
	},
	"negative values": {OverallCode: -2, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
		{Code: -1, CurrentLimit: &pb.RateLimitResponse_RateLimit{Unit: -5}, DurationUntilReset: &durationpb.Duration{Seconds: -3, Nanos: -7}},
	}},
	"a quota (proto's path)": {Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Quota: &pb.RateLimitResponse_Quota{Requests: 3}}}},
}

func TestCodecWritesResponses(t *testing.T) {
	c := newCodec()
	for name, want := range codecResponses {
		t.Run(name, func(t *testing.T) {
			data, err := c.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			b := data.Materialize()
			got := &pb.RateLimitResponse{}
			if err := proto.Unmarshal(b, got); err != nil || !proto.Equal(got, want) {
				t.Fatalf("wrote %x, read back as %v, %v; want %v", b, got, err, want)
			}
			if want.DynamicMetadata == nil { // a map's order is protobuf's choice
				if pb, _ := proto.Marshal(want); string(pb) != string(b) {
					t.Errorf("wrote %x, protobuf writes %x", b, pb)
				}
			}
		})
	}
	t.Run("a nil status (proto's path)", func(t *testing.T) {
		r := &pb.RateLimitResponse{Statuses: []*pb.RateLimitResponse_DescriptorStatus{nil}}
		data, err := c.Marshal(r)
		want, wantErr := proto.Marshal(r)
		if (err == nil) != (wantErr == nil) || err == nil && string(data.Materialize()) != string(want) {
			t.Errorf("wrote %x, %v; protobuf writes %x, %v", data.Materialize(), err, want, wantErr)
		}
	})
}

func FuzzCodecWritesAsProto(f *testing.F) {
	for _, r := range codecResponses {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	c := newCodec()
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &pb.RateLimitResponse{}
		if proto.Unmarshal(b, want) != nil {
			return
		}
		data, err := c.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := &pb.RateLimitResponse{}
		if err := proto.Unmarshal(data.Materialize(), got); err != nil || !proto.Equal(got, want) {
			t.Fatalf("read back %v, %v; want %v", got, err, want)
		}
	})
}

// TestCodecAllocations: the fast paths allocate a handful of times per message, where
// protobuf's reflective code allocates once per message, slice and string.
func TestCodecAllocations(t *testing.T) {
	c := newCodec()
	req := codecRequests["two descriptors"]
	b, _ := proto.Marshal(req)
	reads := testing.AllocsPerRun(100, func() {
		if !readRequest(b, &pb.RateLimitRequest{}) {
			t.Fatal("not read by the fast path")
		}
	})
	resp := codecResponses["two statuses"]
	writes := testing.AllocsPerRun(100, func() {
		if _, err := c.Marshal(resp); err != nil {
			t.Fatal(err)
		}
	})
	// Reading: a string, the descriptors, their entries, pointers to each. Writing: the
	// buffer, its slice and the interface that holds it, as for protobuf's.
	if reads > 5 || writes > 3 {
		t.Errorf("%v allocations to read a request, %v to write an answer; want at most 5 and 3", reads, writes)
	}
}
