package rlqs

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fleet holds, for every bucket, the demand of each Envoy instance reporting for it, so that a
// limit is divided among them: in this process (NewTable, local mode) or in Redis (NewRedis,
// cluster mode: every dianad sees the instances the others serve).
type Fleet interface {
	// Merge applies each report in one round trip and fills in its Sum, Known, Unknown and Full.
	Merge(ctx context.Context, reps []*Report) error
}

// Report is one instance's demand for one bucket, and the fleet's answer.
type Report struct {
	Group    string // the bucket's fleet-wide identity (the domain and the bucket's counted values)
	Instance string // the stream: unique across every dianad sharing the fleet
	Demand   int64  // milli-requests a second; Unknown, or Leave: the instance leaves the bucket
	TTL      time.Duration
	// Sum is the live instances' summed known demand (this one's included), Known and Unknown
	// how many have a known demand and how many not yet; Full says the bucket holds
	// MaxInstances already and this instance is new: nothing recorded.
	Sum, Known, Unknown int64
	Full                bool
}

// Report.Demand's special values.
const (
	Unknown = -1 // not measured yet (the bucket's first report)
	Leave   = -2 // the instance no longer reports for the bucket
)

// MaxInstances bounds the instances one bucket holds: a fleet of Envoy instances is this large
// at most, and the Redis script reads them all on each report.
const MaxInstances = 4096

// entry is one instance's demand in a bucket and when it expires (µs).
type entry struct{ demand, expires int64 }

// merge is the transition of one bucket, the Go twin of fleet.lua: it drops the expired
// instances, records instance's demand (≥ 0, or Unknown), expiring at now+ttl, or removes it
// (Leave), and returns the live instances' summed known demand, how many have a known demand
// and how many not; full when the bucket holds max instances and instance is new (nothing
// recorded).
func merge(g map[string]entry, now int64, instance string, demand, ttl int64, max int) (sum, known, unknown int64, full bool) {
	count := func(d int64) {
		if d < 0 {
			unknown++
		} else {
			sum, known = sum+d, known+1
		}
	}
	_, mine := g[instance]
	for k, e := range g {
		switch {
		case k == instance:
		case e.expires > now:
			count(e.demand)
		default:
			delete(g, k)
		}
	}
	switch {
	case demand == Leave:
		delete(g, instance)
	case !mine && known+unknown >= int64(max):
		return sum, known, unknown, true
	default:
		g[instance] = entry{demand, now + ttl}
		count(demand)
	}
	return sum, known, unknown, false
}

// Table is the Fleet of one process (local mode). Safe for concurrent use.
type Table struct {
	mu     sync.Mutex
	groups map[string]map[string]entry
	now    func() time.Time
}

// NewTable returns an empty table on the clock now (nil: time.Now).
func NewTable(now func() time.Time) *Table {
	if now == nil {
		now = time.Now
	}
	return &Table{groups: map[string]map[string]entry{}, now: now}
}

// Merge implements Fleet.
func (t *Table) Merge(_ context.Context, reps []*Report) error {
	now := t.now().UnixMicro()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range reps {
		g := t.groups[r.Group]
		if g == nil {
			if r.Demand == Leave {
				continue
			}
			g = map[string]entry{}
			t.groups[r.Group] = g
		}
		r.Sum, r.Known, r.Unknown, r.Full = merge(g, now, r.Instance, r.Demand, r.TTL.Microseconds(), MaxInstances)
		if len(g) == 0 {
			delete(t.groups, r.Group)
		}
	}
	return nil
}

// Groups is the number of buckets the table holds.
func (t *Table) Groups() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.groups)
}

//go:embed fleet.lua
var fleetLua string

var fleetScript = redis.NewScript(fleetLua)

// Redis is the Fleet of a cluster of dianad: each bucket a hash in Redis with its instances'
// expiries and totals beside it, changed only by fleet.lua, on Redis's clock. A report costs
// Redis O(log n) in the bucket's n instances (and the expired ones it removes), not a read of
// all n.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	now    func() time.Time // nil: Redis TIME
}

// NewRedis returns the fleet kept in c under keys starting with prefix. now, if set, is sent
// to the script instead of letting it read Redis TIME: for replays in virtual time (tests), as
// redisstore's CallerClock; dianad leaves it nil.
func NewRedis(c redis.UniversalClient, prefix string, now func() time.Time) *Redis {
	return &Redis{c: c, prefix: prefix, now: now}
}

// Key is the hash of a bucket's group: its identity hashed (a bucket id may be long and hold
// any byte), as its own hash tag so that the script runs on a Redis Cluster.
func (r *Redis) Key(group string) string {
	h := sha256.Sum256([]byte(group))
	return r.prefix + "rlqs:{" + hex.EncodeToString(h[:16]) + "}"
}

// keys are the script's keys of a group: the hash of its instances (Key), the sorted set of
// their expiries and the hash of their totals, under one hash tag.
func (r *Redis) keys(group string) []string {
	k := r.Key(group)
	return []string{k, k + ":exp", k + ":sum"}
}

// Merge implements Fleet: one pipeline of EVALSHA, sent again with EVAL if Redis did not know
// the script (NOSCRIPT): EVAL needs no right beyond the least privilege of docs/redis.md, where
// SCRIPT LOAD would. A report sets its instance's demand, so one applied twice counts once.
func (r *Redis) Merge(ctx context.Context, reps []*Report) error {
	return r.mergeMax(ctx, reps, MaxInstances)
}

func (r *Redis) mergeMax(ctx context.Context, reps []*Report, maxInstances int) error {
	if len(reps) == 0 {
		return nil
	}
	now := int64(-1)
	if r.now != nil {
		now = r.now().UnixMicro()
	}
	run := func(send func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) ([]*redis.Cmd, error) {
		p := r.c.Pipeline()
		cmds := make([]*redis.Cmd, len(reps))
		for i, rep := range reps {
			cmds[i] = send(ctx, p, r.keys(rep.Group), now, rep.Instance, rep.Demand, rep.TTL.Microseconds(), maxInstances)
		}
		_, err := p.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(fleetScript.EvalSha)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmds, err = run(fleetScript.Eval)
	}
	if err != nil {
		return fmt.Errorf("rlqs: redis: %w", err)
	}
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 4 {
			return errors.Join(fmt.Errorf("rlqs: redis: the fleet script's reply %v", c.Val()), err)
		}
		reps[i].Sum, reps[i].Known, reps[i].Unknown, reps[i].Full = v[0], v[1], v[2], v[3] == 1
	}
	return nil
}

// groupKey is a bucket's fleet-wide identity: the domain, the limit's entries and the values
// they count under, each escaped so that no two buckets share one.
func groupKey(domain string, entries, values []string) string {
	b := make([]byte, 0, 64)
	b = strconv.AppendQuote(b, domain)
	for i, k := range entries {
		b = append(b, '|')
		b = strconv.AppendQuote(b, k)
		b = append(b, '=')
		b = strconv.AppendQuote(b, values[i])
	}
	return string(b)
}
