package main

import (
	"context"
	"net/netip"
	"strconv"
	"time"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/slotstore"
)

type mapData struct {
	vals  map[string][]byte
	cases map[string]uint32
	n     uint32
}

func (d *mapData) Get(k string) ([]byte, uint32, error) {
	v, ok := d.vals[k]
	if !ok {
		return nil, 0, slotstore.ErrNotFound
	}
	c := make([]byte, len(v))
	copy(c, v)
	return c, d.cases[k], nil
}
func (d *mapData) Set(k string, v []byte, cas uint32) error {
	if _, ok := d.vals[k]; ok && cas != 0 && cas != d.cases[k] {
		return slotstore.ErrCasMismatch
	}
	d.n++
	d.vals[k] = append([]byte(nil), v...)
	d.cases[k] = d.n
	return nil
}

type hdrs struct{}

func (hdrs) Get(string) string { return "" }

func main() {
	doc, err := conf.ParseJSON([]byte(`{"rules": [
		{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1s"}},
		{"name": "per-ip-path", "by": ["ip", "path"], "limit": {"algorithm": "fixed_window", "limit": 1000000000, "window": "1m"}},
		{"name": "global", "limit": {"algorithm": "sliding_window", "limit": 1000000000, "window": "1s"}}]}`))
	if err != nil {
		panic(err)
	}
	errs := &conf.Errors{}
	o := conf.Read(doc, errs)
	rs := rules.Decode(o)
	d := &mapData{vals: map[string][]byte{}, cases: map[string]uint32{}}
	now := int64(1_700_000_000_000_000)
	s := &slotstore.Store{Data: d, Now: func() int64 { now++; return now }, Key: [2]uint64{1, 2}, Slots: 512, Entries: 16, Retries: 8}
	e, err := rules.New(rs, rules.Options{Local: s})
	if err != nil {
		panic(err)
	}
	const n = 20000
	ips := make([]string, 1000)
	for i := range ips {
		ips[i] = "10.1." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	t := time.Now()
	for i := 0; i < n; i++ {
		a, _ := netip.ParseAddr(ips[i%1000])
		_ = rules.ClientKey(a, 64)
	}
	println("clientkey ns/op", time.Since(t).Nanoseconds()/n)
	t = time.Now()
	for i := 0; i < n; i++ {
		rules.NormalPath("/p", rules.DecodeSlashes)
	}
	println("normalpath ns/op", time.Since(t).Nanoseconds()/n)
	t = time.Now()
	for i := 0; i < n; i++ {
		s.Hash("per-ip|" + ips[i%1000])
	}
	println("siphash ns/op", time.Since(t).Nanoseconds()/n)
	for _, k := range []int{1000, n} {
		t = time.Now()
		for i := 0; i < k; i++ {
			in := rules.Input{Method: "GET", Host: "example.com", Path: "/p", ClientIP: ips[i%1000], Headers: hdrs{}}
			res := e.Check(context.Background(), &in)
			if !res.Allowed {
				panic("denied")
			}
		}
		println("check ns/op", time.Since(t).Nanoseconds()/int64(k))
	}
	op := &rules.Op{Key: "per-ip|10.1.0.1", Alg: rs[0].Alg}
	t = time.Now()
	for i := 0; i < n; i++ {
		op.Req.Cost = 1
		s.Decide(context.Background(), []*rules.Op{op})
	}
	println("slot decide ns/op", time.Since(t).Nanoseconds()/n)
}
