package failover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// Headroom is what a learned share is raised by before it limits a node: 2% of the share, so
// that the nodes' parts add up to 102% of the limit (plus at most 1/1000 per node, the share
// being rounded up to thousandths). Without it, the rounding down of each part and the drift of
// the traffic since the last sync would leave the cluster under its limit.
const Headroom = 0.02

// shareQuantum is the resolution of a learned share: thousandths of the limit. A share changes
// the fallback algorithm only when it moves by a quantum, so that Decide reuses the one built.
const shareQuantum = 1000

// minTotal is the least traffic of a rule, in units per interval summed over the nodes, for
// which its shares count as history: below it (or before a node's second exchange of the rule)
// the node falls back to the limit divided by the rule's node count.
const minTotal = 1

// horizon is about how many intervals a node's moving average spans: each interval's count
// moves the average by 1/horizon of its difference from it (with 2, half the new count, half
// the old average).
const horizon = 2

// prior is the weight, in units counted over the horizon, of the even split a learned share
// starts from: a node's share is (horizon × its average + prior / nodes) / (horizon × the total +
// prior), nodes being those that wrote. A share counted from a few requests is mostly chance: with
// the prior, sparse traffic gets about the even split, and busy traffic its measured one (the
// figures are in docs/redis.md, "Tuning, as measured"). The shares still add up to 1.
const prior = 40

// dropAfter is how many syncs a rule this node has no traffic for is kept; then it is forgotten
// (a rule renamed or removed by a reload does not stay for ever).
const dropAfter = 300

// ShareOptions tune Shares. Zero values take the defaults.
type ShareOptions struct {
	// Prefix starts the keys of the shares, as redisstore.Options.Prefix does; default redisstore.DefaultPrefix.
	Prefix string
	// Node names this node among those that share Redis; default the host name, the process id
	// and a random suffix. Two nodes must not share a name.
	Node string
	// Every is how often the counts are exchanged with Redis; default 1s. A node that has not
	// written for 3 × Every is left out of the totals (it left the cluster).
	Every time.Duration
	// Manual stops Decide from starting the exchanges: the caller calls Sync (tests).
	Manual bool
	// Now is the clock; default time.Now. When set, Sync sends its time to Redis, which then
	// judges staleness by it instead of its own TIME (tests).
	Now func() time.Time
	// OnError, if set, is told the error of each exchange that Decide started and that failed
	// (the shares learned before stay).
	OnError func(err error)
}

// Shares learns each node's share of each rule's traffic while Redis answers, so that a node
// deciding alone while Redis cannot (on_error local) limits at its share of the limit instead of
// the limit divided by the rule's node count.
//
// Per rule (by name) with policy FailLocal, each node counts the units requested of it: the
// requests decided or committed (cost units each) and the dry runs denied (a request checked
// against several rules that one denies is never committed), not releases. Every interval it
// folds the count (scaled to one interval if more time passed) into a moving average (half of
// the new count, half of the old average: the weight of an interval halves with each later one)
// and writes the average into a Redis hash of the rule, one field per node, in one script call
// for every rule, which also sums the fields of the nodes that wrote in the last 3 intervals and
// drops the others. The node's share is its average over that sum. No request waits for it:
// Decide starts it in the background at most once an interval, and not while the breaker is
// open (the shares learned last hold through an outage).
//
// The share is per rule, not per key: a client whose traffic is split among the nodes unlike
// the rule's as a whole gets at most the limit (the parts add up to it plus the headroom) but
// can get less, down to its traffic on the node where its part is smallest relative to the
// rule's.
type Shares struct {
	c        redis.Scripter
	o        ShareOptions
	prefix   string
	stale    time.Duration
	sendTime bool // ShareOptions.Now was given: Redis judges staleness by it

	// rules is read on every decision without a lock; it is replaced, never changed, under mu
	// (a rule is added or dropped rarely).
	rules atomic.Pointer[map[string]*ruleShare]
	mu    sync.Mutex

	start   atomic.Int64 // unix ns when the counts since the last sync began; 0: nothing counted yet
	pending atomic.Bool  // a sync Decide started is under way
	syncing sync.Mutex
}

// ruleShare is what a node has learned of one rule.
type ruleShare struct {
	count atomic.Int64  // units since the last sync
	milli atomic.Int64  // the share with the headroom, in thousandths of the limit; 0: no history
	share atomic.Uint64 // the share learned, without headroom (float64 bits), for metrics
	alg   atomic.Pointer[built]

	// Changed only by Sync (under Shares.syncing).
	avg   float64 // moving average of the units per interval; < 0 before the first sync
	idle  int     // syncs in a row without traffic
	syncs int     // exchanges of the rule that Redis answered
}

// built is the fallback algorithm of a rule at a share, kept until either changes.
type built struct {
	rule  *rules.Rule
	milli int64
	alg   algos.Algorithm // nil: the share could not be built (the rule's Fallback decides)
}

// NewShares returns Shares that exchange counts in the Redis c reaches.
func NewShares(c redis.Scripter, o ShareOptions) *Shares {
	if o.Prefix == "" {
		o.Prefix = redisstore.DefaultPrefix
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Node == "" {
		o.Node = nodeName()
	}
	sendTime := o.Now != nil
	if o.Now == nil {
		o.Now = time.Now
	}
	// One hash tag for every rule's hash: the script touches them all, which Redis Cluster
	// allows only within one slot.
	sh := &Shares{c: c, o: o, prefix: o.Prefix + "shares:{shares}:", stale: 3 * o.Every, sendTime: sendTime}
	sh.rules.Store(&map[string]*ruleShare{})
	return sh
}

// nodeName is the default ShareOptions.Node.
func nodeName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// note counts op once it is decided, by Redis or not: a node's traffic is what it is asked,
// and a node that cannot reach Redis while the others can must not see its share shrink.
func (sh *Shares) note(op *rules.Op) {
	r := op.Rule()
	if r == nil || op.OnError != rules.FailLocal || op.Req.Release || op.Req.DryRun && op.Dec.Allowed {
		return
	}
	cost := op.Req.Bounded().Cost
	if cost == 0 {
		return
	}
	rs := (*sh.rules.Load())[r.Name]
	if rs == nil {
		rs = sh.add(r.Name)
	}
	rs.count.Add(cost)
	if sh.start.Load() == 0 {
		sh.start.CompareAndSwap(0, sh.o.Now().UnixNano())
	}
}

// add returns the share of the rule named name, adding it if it is not there.
func (sh *Shares) add(name string) *ruleShare {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := *sh.rules.Load()
	if rs := m[name]; rs != nil {
		return rs
	}
	m = maps.Clone(m)
	rs := &ruleShare{avg: -1}
	m[name] = rs
	sh.rules.Store(&m)
	return rs
}

// due reports whether a sync should start now, and if so claims it.
func (sh *Shares) due() bool {
	if sh.o.Manual {
		return false
	}
	start := sh.start.Load()
	if start == 0 || sh.o.Now().UnixNano()-start < int64(sh.o.Every) {
		return false
	}
	return sh.pending.CompareAndSwap(false, true)
}

// background runs one sync bounded by an interval. On an error the shares learned so far stay,
// and the next interval tries again.
func (sh *Shares) background() {
	defer sh.pending.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), sh.o.Every)
	defer cancel()
	if err := sh.Sync(ctx); err != nil && sh.o.OnError != nil {
		sh.o.OnError(err)
	}
}

// Sync exchanges this node's counts with Redis and updates its shares: one script call for all
// the rules it has counted. On an error nothing is learned and the shares stay as they were.
// Calls do not overlap: one made while another runs waits for it.
func (sh *Shares) Sync(ctx context.Context) error {
	sh.syncing.Lock()
	defer sh.syncing.Unlock()
	now := sh.o.Now().UnixNano()
	perInterval := sh.perInterval(now)
	m := *sh.rules.Load()
	names := make([]string, 0, len(m))
	list := make([]*ruleShare, 0, len(m))
	for name, rs := range m {
		names = append(names, name)
		list = append(list, rs)
	}
	if len(list) == 0 {
		return nil
	}

	var drop []string
	keys := make([]string, len(list))
	args := make([]any, 3, 3+len(list))
	args[0], args[1], args[2] = sh.o.Node, "", sh.stale.Milliseconds()
	if sh.sendTime {
		args[1] = now / int64(time.Millisecond)
	}
	for i, rs := range list {
		if rs.fold(float64(rs.count.Swap(0)) * perInterval) {
			drop = append(drop, names[i])
		}
		keys[i] = sh.prefix + names[i]
		args = append(args, strconv.FormatFloat(rs.avg, 'g', 10, 64))
	}
	sh.forget(drop)

	res, err := shareScript.Run(ctx, sh.c, keys, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("failover: shares: %w", err)
	}
	return sh.learn(names, list, res)
}

// perInterval is what scales the counts made until now to one interval: those of a longer
// period (traffic too sparse to start a sync each interval) are scaled down. A node's first
// period starts at its first count.
func (sh *Shares) perInterval(now int64) float64 {
	elapsed := int64(sh.o.Every)
	if start := sh.start.Swap(now); start != 0 {
		elapsed = max(elapsed, now-start)
	}
	return float64(sh.o.Every) / float64(elapsed)
}

// fold folds c, the units of the last interval, into rs's moving average, and reports whether
// rs has had no traffic for dropAfter syncs.
func (rs *ruleShare) fold(c float64) (drop bool) {
	if rs.avg < 0 {
		rs.avg = c // a node's first interval stands for its past: no ramp from 0
	} else {
		rs.avg += (c - rs.avg) / horizon
	}
	if c == 0 {
		rs.idle++
	} else {
		rs.idle = 0
	}
	return rs.idle >= dropAfter
}

// forget drops the rules named.
func (sh *Shares) forget(names []string) {
	if len(names) == 0 {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := maps.Clone(*sh.rules.Load())
	for _, name := range names {
		delete(m, name)
	}
	sh.rules.Store(&m)
}

// learn updates the shares of the rules list (named names) from the script's answers res, one
// "sum:nodes" each.
func (sh *Shares) learn(names []string, list []*ruleShare, res []string) error {
	if len(res) != len(list) {
		return fmt.Errorf("failover: shares: the script answered %d totals for %d rules", len(res), len(list))
	}
	for i, rs := range list {
		t, n, _ := strings.Cut(res[i], ":")
		total, err := strconv.ParseFloat(t, 64)
		nodes, err2 := strconv.Atoi(n)
		if err != nil || err2 != nil || nodes < 1 {
			return fmt.Errorf("failover: shares: total of %s: %q", names[i], res[i])
		}
		// At its first exchange a node may be the first of the cluster to write: the others, which
		// exchange once an interval too, have all written by its second.
		if rs.syncs++; rs.syncs < 2 || total < minTotal {
			rs.milli.Store(0)
			rs.share.Store(0)
			continue
		}
		share := min((horizon*rs.avg+prior/float64(nodes))/(horizon*total+prior), 1)
		rs.share.Store(math.Float64bits(share))
		rs.milli.Store(quantise(share))
	}
	return nil
}

// quantise returns share with the headroom, in thousandths rounded up, within [1, 1000].
func quantise(share float64) int64 {
	// The tolerance keeps float error (0.1 × 1.02 × 1000 = 102.00000000000001) from a quantum.
	q := int64(math.Ceil(share*(1+Headroom)*shareQuantum - 1e-9))
	return min(max(q, 1), shareQuantum)
}

// alg returns r's fallback at its learned share, or nil without history (or when no share of
// its limit can be built). It allocates only when the share or the rule changed.
func (sh *Shares) alg(r *rules.Rule) algos.Algorithm {
	rs := (*sh.rules.Load())[r.Name]
	if rs == nil {
		return nil
	}
	milli := rs.milli.Load()
	if milli == 0 {
		return nil
	}
	if b := rs.alg.Load(); b != nil && b.rule == r && b.milli == milli {
		return b.alg
	}
	b := &built{rule: r, milli: milli, alg: buildShare(r, milli)}
	rs.alg.Store(b)
	return b.alg
}

// buildShare builds r's fallback at milli thousandths of its limit; when an algorithm's bounds
// refuse that fraction (a rate that would need too long a period), at the share rounded up to
// hundredths, then tenths; nil if none can be built.
func buildShare(r *rules.Rule, milli int64) algos.Algorithm {
	for den := int64(shareQuantum); den >= 10; den /= 10 {
		num := (milli*den + shareQuantum - 1) / shareQuantum
		if a, err := r.FallbackAt(num, den); err == nil {
			return a
		}
	}
	return nil
}

// Each calls f with every rule this node has learned a share of, and the share without
// headroom (0: no history yet).
func (sh *Shares) Each(f func(rule string, share float64)) {
	for name, rs := range *sh.rules.Load() {
		f(name, math.Float64frombits(rs.share.Load()))
	}
}

// shareScript writes one node's average for each rule (KEYS, one hash per rule) and returns the
// sum over the nodes that wrote within the staleness and their number, "sum:nodes", dropping the
// others. ARGV: node, now in
// ms ("" for Redis TIME; a given time keeps the hash an hour longer), staleness in ms, then the
// averages. A field is "average:ms".
var shareScript = redis.NewScript(`
local node, stale = ARGV[1], tonumber(ARGV[3])
local now, life = tonumber(ARGV[2]), stale
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  -- A caller-given time is for tests and simulations, not Redis's clock: the hash must outlive
  -- them however slowly they run, as the algorithm scripts' keys do.
  life = stale + 3600000
end
local out = {}
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, node, ARGV[3 + i] .. ':' .. now)
  local all = redis.call('HGETALL', key)
  local total, nodes = 0, 0
  for j = 1, #all, 2 do
    local avg, at = string.match(all[j + 1], '^([^:]+):(%d+)$')
    at = tonumber(at)
    if at == nil or now - at > stale or tonumber(avg) == nil then
      redis.call('HDEL', key, all[j])
    else
      total, nodes = total + tonumber(avg), nodes + 1
    end
  end
  redis.call('PEXPIRE', key, life)
  out[i] = tostring(total) .. ':' .. nodes
end
return out
`)
