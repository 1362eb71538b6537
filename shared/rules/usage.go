package rules

import (
	"errors"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/usage"
)

// A cost known only from the response (an LLM's tokens): a rule with a Usage.
//
// Admission reserves an estimate (reserve): for a rule that reads a provider's format, the
// request's input (its body's size over BytesPerToken) and its output cap (max_tokens and the
// like, usage.Request), priced as the response will be; else the request body's EstimateBody
// field; else Estimate. A request whose cap the gateway cannot read for sure (past the bytes it
// reads, given twice, compressed, not a whole number) reserves the rule's worst case, or is
// refused (Refuse). A reservation is at most the rule's limit, so that a request is admitted while
// the budget has room for it. The front end then reads the usage from the response (Meter: a
// header or a trailer, a JSON body or a stream's events, as fields or in a provider's format)
// and, once the response has ended, Engine.Settle charges each rule the actual cost in one store
// call per rule (algos.Settle: one Redis script in cluster mode): the difference is debited or
// credited, without a check, so a budget may go below zero, and later requests are then denied
// with the Retry-After of the debt. A response without a usable usage (an upstream error, a
// client gone, a field missing, a hostile value: shared/usage's errors) is charged the rule's
// Fallback, by default the request's worst case (worst), and Options.Settled is told why, for a
// metric and a log line.
//
// A settlement is an op like the others, so it goes through every store stack: memstore,
// slotstore, store/failover (a settlement Redis cannot take is settled by the rule's fail policy:
// in process memory for on_error local, dropped for open and closed), store/batch (which passes it
// through: a usage rule cannot be batched) and redisstore. The token bucket, the fixed window and
// the (two-window) sliding window settle; the others are refused at config time, as are action
// delay and batch.
//
// Exactness in cluster mode: every admission and every settlement is one atomic script, so the
// units spent across all nodes are at most the budget plus what is in flight: the actual costs,
// beyond their estimates, of the requests not settled yet. A node that dies between admission and
// settlement loses those requests' settlements: at most its in-flight requests' actual costs
// beyond their estimates.

// UsageSpec is where a rule's cost is read from the response, as given.
type UsageSpec struct {
	Header string // response headers whose values add up to the cost: "x-usage-total-tokens"
	Body   string // JSON paths of the response body, or of its stream's usage event: "usage.total_tokens"
	Format string // a provider's format (usage.FormatNames): its token counts, by class
	// Estimate is the units reserved at admission when the request names no output cap
	// (default 1), and EstimateBody a JSON path of the request body to take them from instead
	// ("max_tokens").
	Estimate     int64
	EstimateBody string
	// Fallback is the cost of a response whose usage cannot be read, and what a request whose
	// cap cannot be read reserves; -1 (the default): the request's worst case (see worst).
	Fallback int64
	// StreamUsage is which events of a text/event-stream carry Body's usage: one (the default;
	// a second is an error) or the last of many (a running total in every event).
	StreamUsage usage.Events
	// Weights price Format's token classes in units per token (default 1 each); Prices per
	// model, in a currency per million tokens, for a budget in millionths of it. Nil: none.
	Weights *usage.Rates
	Prices  []ModelPrice
	// Refuse: a request whose output cap cannot be read is refused (400) rather than reserve the
	// worst case.
	Refuse bool
	// BytesPerToken is the request body's bytes per input token that admission reserves for
	// (default DefaultBytesPerToken with Format, else 0: none).
	BytesPerToken int64
}

// ModelPrice is what a model's tokens cost: Model is its name, or a prefix of names ending in
// "*", or "default" for the models no other entry names.
type ModelPrice struct {
	Model string
	Rates usage.Rates
}

// DefaultBytesPerToken is UsageSpec.BytesPerToken's default with a format: about four bytes of
// English text make a token (OpenAI's rule of thumb), and JSON's quoting only adds bytes.
const DefaultBytesPerToken = 4

// The worst case of a request whose output cap is unknown (worst): the largest context windows
// (a million tokens) and the largest output caps (128 Ki tokens) that providers offer.
const (
	WorstInput  = 1 << 20
	WorstOutput = 1 << 17
)

// Unreadable names what a request whose output cap cannot be read gets, by UsageSpec.Refuse.
var Unreadable = [...]string{"reserve", "refuse"}

// NewUsageSpec returns a UsageSpec holding the defaults: estimate 1, fallback the worst case.
func NewUsageSpec() UsageSpec { return UsageSpec{Estimate: 1, Fallback: -1, BytesPerToken: -1} }

// Usage is a rule's cost from the response, checked and parsed.
type Usage struct {
	Header, Body *usage.Fields // one of them, or Format
	// Format is the provider format the response is read in; nil with Auto, which picks it by
	// the request's path (usage.FormatForPath) or the response's marks.
	Format       *usage.Format
	Auto         bool
	Estimate     int64
	EstimateBody *usage.Fields // nil: none
	Fallback     int64         // -1: the request's worst case
	StreamUsage  usage.Events  // which events of a stream carry Body's usage
	Refuse       bool
	// BytesPerToken: the input reserved per byte of the request body; 0: none.
	BytesPerToken int64
	price         pricing
}

// ReadsFormat reports whether the response is read in a provider's format (or Auto).
func (u *Usage) ReadsFormat() bool { return u.Format != nil || u.Auto }

// readsRequest reports whether admission reads the request body (its cap, its model, its field).
func (u *Usage) readsRequest() bool { return u.ReadsFormat() || u.EstimateBody != nil }

// MaxPeek is the most bytes of a request body a front end reads ahead for the rules that read it
// (and keeps, to forward them): a field further into the body cannot be read for sure.
const MaxPeek = 1 << 20

// CannotSettle is in the reason of every error on an algorithm that cannot settle a usage rule's
// cost, for a front end that adapts such a rule rather than refuse it (the Kong plugin).
const CannotSettle = "cannot settle a cost read from the response (usage)"

// SettlingAlgorithms lists the registered algorithms a usage rule may have: those whose
// algorithm settles a late cost (algos.Settles); sliding_window only without subwindows.
func SettlingAlgorithms() []string {
	return AlgorithmsWhere(func(k AlgorithmKind) bool {
		a, err := k.Build(k.Resolve(k.Example()), 1)
		return err == nil && algos.Settles(a)
	})
}

// rateMax bounds a weight, and a price per million tokens.
const rateMax = usage.MaxRateUnits

// readUsage reads the usage object of a rule.
func readUsage(o *conf.Obj) *UsageSpec {
	if !o.Has("usage") || o.IsNull("usage") {
		o.Obj("usage") // marks it read
		return nil
	}
	uo := o.Obj("usage")
	if o.Failed("usage") {
		return nil
	}
	u := NewUsageSpec()
	u.Header = uo.String("header", "")
	u.Body = uo.String("body", "")
	u.Format = uo.Enum("format", "", usage.FormatNames...)
	u.Estimate = uo.Int("estimate", u.Estimate, costBounds[0], costBounds[1])
	u.EstimateBody = uo.String("estimate_body", "")
	u.Fallback = uo.Int("fallback", u.Fallback, costBounds[0], costBounds[1])
	u.StreamUsage = usage.Events(uo.EnumIndex("stream_usage", usage.EventsNames...))
	u.Refuse = uo.EnumIndex("unreadable", Unreadable[:]...) == 1
	u.BytesPerToken = uo.Int("bytes_per_token", u.BytesPerToken, 0, 1<<20)
	if uo.Has("weights") {
		w := usage.UnitRates
		readRates(uo.Obj("weights"), &w, true)
		u.Weights = &w
	}
	uo.ObjMap("prices", func(model string, po *conf.Obj) {
		var r usage.Rates
		readRates(po, &r, false)
		u.Prices = append(u.Prices, ModelPrice{Model: model, Rates: r})
	})
	uo.Done()
	o.Refuse("cost", "the cost comes from the response (usage): usage.estimate is what admission reserves")
	return &u
}

// readRates reads the rates of the token classes: weights (each 1 by default), or a model's
// prices (input and output required, cached_input and cache_write the input's by default,
// cache_write_1h cache_write's, reasoning the output's).
func readRates(o *conf.Obj, r *usage.Rates, weights bool) {
	if !weights && !o.NotAnObject() {
		o.Require(usage.ClassNames[usage.Input], usage.ClassNames[usage.Output])
	}
	var given [usage.NumClasses]bool
	for c, name := range usage.ClassNames {
		if s := o.Decimal(name, rateMax); s != "" {
			r[c], _ = usage.ParseRate(s) // Decimal checked its form
			given[c] = true
		}
	}
	if !weights {
		for _, d := range [...][2]usage.TokenClass{{usage.CachedInput, usage.Input}, {usage.CacheWrite, usage.Input},
			{usage.CacheWrite1h, usage.CacheWrite}, {usage.Reasoning, usage.Output}} {
			if !given[d[0]] {
				r[d[0]] = r[d[1]]
			}
		}
	}
	o.Done()
}

// buildUsage checks the usage and sets r.Usage; the rule's algorithm, action and batch are
// checked against it after they are built.
func (r *Rule) buildUsage(o *conf.Obj, s *UsageSpec) {
	if s == nil {
		return
	}
	uo := o.Obj("usage")
	u := &Usage{Estimate: s.Estimate, Fallback: s.Fallback, StreamUsage: s.StreamUsage, Refuse: s.Refuse}
	given := 0
	for _, v := range []string{s.Header, s.Body, s.Format} {
		if v != "" {
			given++
		}
	}
	switch {
	case given == 0 && !uo.Failed("header", "body", "format"):
		o.Fail("usage", "needs header, body or format: where the response tells the cost")
	case given > 1:
		uo.Fail("body", "header, body and format cannot be combined: the cost is read from one of them")
	case s.Header != "":
		f, err := usage.ParseHeaders(s.Header)
		if err != nil {
			uo.Fail("header", err.Error())
		}
		u.Header = f
	case s.Body != "":
		f, err := usage.ParsePaths(s.Body)
		if err != nil {
			uo.Fail("body", err.Error())
		}
		u.Body = f
	case s.Format == usage.FormatAuto:
		u.Auto = true
	case s.Format != "":
		if u.Format = usage.FormatNamed(s.Format); u.Format == nil && !uo.Failed("format") {
			uo.Fail("format", "must be one of "+strings.Join(usage.FormatNames, ", ")+", got "+quote(s.Format))
		}
	}
	if s.StreamUsage != usage.OneEvent && u.Body == nil {
		uo.Fail("stream_usage", "applies to body's stream of events: a header is read once, and a format knows its own events")
	}
	if s.EstimateBody != "" {
		f, err := usage.ParsePaths(s.EstimateBody)
		if err != nil {
			uo.Fail("estimate_body", err.Error())
		}
		u.EstimateBody = f
	}
	uo.CheckInt("estimate", s.Estimate, costBounds[0], costBounds[1])
	if s.Fallback != -1 {
		uo.CheckInt("fallback", s.Fallback, costBounds[0], costBounds[1])
	}
	u.BytesPerToken = s.BytesPerToken
	if u.BytesPerToken < 0 {
		u.BytesPerToken = 0
		if u.ReadsFormat() {
			u.BytesPerToken = DefaultBytesPerToken
		}
	}
	switch {
	case s.BytesPerToken > 0 && !u.ReadsFormat():
		uo.Fail("bytes_per_token", "applies with format, whose requests name their input in their body")
	case s.Refuse && !u.readsRequest():
		uo.Fail("unreadable", "applies to a rule that reads the request (format or estimate_body): this one reserves its estimate")
	}
	u.price = buildPricing(uo, s, u.ReadsFormat())
	r.Usage = u
}

// checkUsage refuses what a usage rule cannot have: an algorithm without a settlement, a
// delay, a batch. Called once the algorithm is built.
func (r *Rule) checkUsage(o *conf.Obj) {
	if r.Usage == nil {
		return
	}
	if r.Action == Delay {
		o.Fail("action", "delay cannot hold a request whose cost comes from its response (usage): use reject")
	}
	if r.Alg == nil {
		return // the limit's errors are reported already
	}
	if _, batched := r.Alg.(*Batched); batched {
		o.Fail("batch", "cannot be combined with usage: a cost known from the response is settled in the shared store, not in batches")
		return
	}
	if !algos.Settles(r.Alg) {
		lo := o.Obj("limit")
		if r.Algorithm == "sliding_window" && r.params["subwindows"] > 1 {
			lo.Fail("subwindows", "sliding_window with subwindows "+CannotSettle+": remove subwindows")
			return
		}
		lo.Fail("algorithm", r.Algorithm+" "+CannotSettle+": use one of "+strings.Join(SettlingAlgorithms(), ", "))
	}
}

// limitOf is the most units a rule's request can reserve: its limit.
func limitOf(alg algos.Algorithm) int64 { return alg.Script().Limit }

// LLMRequest is what admission read of a request for the usage rules: the request (its model and
// output cap, usage.Request; nil when the front end did not read the body) and its path.
type LLMRequest struct {
	Req   *usage.Request
	Path  string
	body  string // the body's first bytes, as read
	whole bool   // ... all of it
	size  int64  // the body's bytes when known, else -1
}

// readLLM reads what the usage rules need of in, once per request.
func readLLM(in *Input) *LLMRequest {
	l := &LLMRequest{Path: in.Path, size: -1, body: in.Body, whole: in.BodyState == BodyWhole}
	switch in.BodyState {
	case BodyUnread:
		if in.BodyLength > 0 {
			l.size = in.BodyLength
		}
		return l
	case BodyEncoded:
		l.Req = &usage.Request{Err: errEncodedRequest}
	default:
		q := usage.ReadRequest(in.Body, in.BodyState == BodyWhole)
		l.Req = &q
	}
	switch {
	case in.BodyState == BodyWhole:
		l.size = int64(len(in.Body))
	case in.BodyLength > 0:
		l.size = in.BodyLength
	}
	return l
}

// errEncodedRequest is why a compressed request body cannot be read.
var errEncodedRequest = &encodedError{what: "request"}

// model returns the request's model for pricing, "" when it cannot be read for sure. Gemini
// names its model in the path: ".../models/gemini-2.5-pro:generateContent".
func (l *LLMRequest) model() string {
	if l.Req != nil && l.Req.ModelOK {
		return l.Req.Model
	}
	if i := strings.LastIndex(l.Path, "/models/"); i >= 0 {
		if m, _, ok := strings.Cut(l.Path[i+len("/models/"):], ":"); ok && !strings.Contains(m, "/") {
			return m
		}
	}
	return ""
}

// producesNothing reports whether the request's path asks for embeddings, which have no output.
func (l *LLMRequest) producesNothing() bool {
	for _, s := range [...]string{"/embeddings", "/api/embed", "/api/embeddings", ":embedContent", ":batchEmbedContents"} {
		if strings.HasSuffix(l.Path, s) {
			return true
		}
	}
	return false
}

// reserve returns what a request reserves under the rule at admission, and what the rule's
// fallback charges it (its worst case, or the rule's fallback); refused says why the request
// is refused instead (Refuse), "" when it is not.
func (u *Usage) reserve(alg algos.Algorithm, l *LLMRequest) (est, fallback int64, refused string) {
	limit := limitOf(alg)
	rates := u.price.forModel(l.model())
	worst, _ := rates.Cost(usage.Tokens{usage.Input: WorstInput, usage.Output: WorstOutput})
	worst = min(worst, limit)
	var in usage.Tokens
	if u.ReadsFormat() && u.BytesPerToken > 0 && l.size >= 0 {
		in[usage.Input] = (l.size + u.BytesPerToken - 1) / u.BytesPerToken
	}
	input, _ := rates.inputCost(in)
	est, capped := u.Estimate, false
	var unread error
	switch {
	case !u.readsRequest() || l.Req == nil: // the front end reads no body: the estimate
	case l.Req.Err == errEncodedRequest:
		unread = l.Req.Err
	case u.EstimateBody != nil:
		if n, err := u.EstimateBody.Read(l.body, l.whole); err == nil {
			est, _ = rates.outputCost(n)
			capped = true
		} else if !errors.Is(err, usage.ErrMissing) {
			unread = err
		}
	case l.producesNothing():
		est, capped = 0, true
	case l.Req.Err != nil:
		unread = l.Req.Err
	case l.Req.HasCap:
		est, _ = rates.outputCost(l.Req.Cap)
		capped = true
	}
	fallback = u.Fallback
	if unread != nil {
		if u.Refuse {
			return 0, 0, "the request's output cap cannot be read: " + unread.Error()
		}
		if fallback < 0 {
			fallback = worst
		}
		return min(fallback, limit), fallback, ""
	}
	est = min(sat(input, est), limit)
	if fallback < 0 {
		fallback = worst
		if capped {
			fallback = est // the request's own bound: the provider stops at its cap
		}
	}
	return est, fallback, ""
}

// sat returns a+b, at most algos.MaxCount.
func sat(a, b int64) int64 { return min(a+b, algos.MaxCount) }

// reservation is an estimate a request reserved under a usage rule, to settle.
type reservation struct {
	rule     *Rule
	key      string
	estimate int64 // 0 when a fail policy admitted it and no store reserved it
	fallback int64 // what an unreadable response is charged
	at       int64 // the engine's clock before the admission, µs
}

// Settles reports whether res reserved estimates that Settle must settle when the response ends.
func (r *Result) Settles() bool { return len(r.reserved) > 0 }

// LLM returns what admission read of the request for its usage rules, nil when no usage rule
// applied: a front end that may edit the request (asking a stream for its usage) reads it here.
func (r *Result) LLM() *LLMRequest { return r.llm }

// pricing turns a response's tokens into a rule's cost units: by weights, or by the prices of
// the model that answered.
type pricing struct {
	weights usage.Rates
	prices  []ModelPrice // exact names, then prefixes longest first; the default last
	max     usage.Rates  // each class's highest price: for a model the gateway does not know
}

// buildPricing checks the weights and prices of s; withFormat: the rule reads a format, which
// gives the classes they price.
func buildPricing(uo *conf.Obj, s *UsageSpec, withFormat bool) pricing {
	p := pricing{weights: usage.UnitRates}
	switch {
	case s.Weights != nil && len(s.Prices) > 0:
		uo.Fail("prices", "cannot be combined with weights: give each model's prices, or weights for every model")
		return p
	case (s.Weights != nil || len(s.Prices) > 0) && !withFormat:
		key := "weights"
		if s.Weights == nil {
			key = "prices"
		}
		uo.Fail(key, "prices token classes, which only a format reads: give format")
		return p
	case s.Weights != nil:
		p.weights = *s.Weights
		return p
	case len(s.Prices) == 0:
		return p
	}
	var def *ModelPrice
	for i := range s.Prices {
		mp := s.Prices[i]
		switch {
		case mp.Model == "default":
			def = &s.Prices[i]
			continue
		case mp.Model == "" || strings.Contains(strings.TrimSuffix(mp.Model, "*"), "*"):
			uo.Obj("prices").Fail(mp.Model, "a model's name, or a prefix ending in *, one * at most")
		}
		p.prices = append(p.prices, mp)
	}
	if def == nil {
		uo.Obj("prices").Fail("default", "is required: the price of a model no other entry names")
		return p
	}
	// Exact names first, then prefixes, longest first: the first match is the most specific.
	sortPrices(p.prices)
	p.prices = append(p.prices, *def)
	for _, mp := range p.prices {
		for c := range p.max {
			p.max[c] = max(p.max[c], mp.Rates[c])
		}
	}
	return p
}

// sortPrices orders exact names before prefixes, and longer prefixes first.
func sortPrices(ps []ModelPrice) {
	rank := func(m ModelPrice) int {
		if strings.HasSuffix(m.Model, "*") {
			return len(m.Model)
		}
		return 1 << 20
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && rank(ps[j]) > rank(ps[j-1]); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// priced reports whether the rule prices by model.
func (p *pricing) priced() bool { return len(p.prices) > 0 }

// forModel returns the rates of model: its price, the default's, or for "" (a model the gateway
// does not know) each class's highest; the weights when the rule has no prices.
func (p *pricing) forModel(model string) *rates {
	if !p.priced() {
		return (*rates)(&p.weights)
	}
	if model == "" {
		return (*rates)(&p.max)
	}
	for i := range p.prices {
		m := p.prices[i].Model
		if m == model || strings.HasSuffix(m, "*") && strings.HasPrefix(model, m[:len(m)-1]) || m == "default" {
			return (*rates)(&p.prices[i].Rates)
		}
	}
	return (*rates)(&p.max)
}

// rates are a model's rates, with the costs admission reserves at.
type rates usage.Rates

// Cost returns what t costs, rounded up, at most algos.MaxCount.
func (r *rates) Cost(t usage.Tokens) (int64, bool) { return (*usage.Rates)(r).Cost(t) }

// inputCost prices input tokens at the dearest of the input classes: a prompt may be written to
// the cache, which costs more.
func (r *rates) inputCost(t usage.Tokens) (int64, bool) {
	n := t[usage.Input]
	dear := max(r[usage.Input], r[usage.CacheWrite], r[usage.CacheWrite1h], r[usage.CachedInput])
	return (&usage.Rates{usage.Input: dear}).Cost(usage.Tokens{usage.Input: n})
}

// outputCost prices n output tokens at the dearer of output and reasoning.
func (r *rates) outputCost(n int64) (int64, bool) {
	dear := max(r[usage.Output], r[usage.Reasoning])
	return (&usage.Rates{usage.Output: dear}).Cost(usage.Tokens{usage.Output: n})
}

// Price returns what u (a response's usage, read in the rule's format) costs under the rule:
// at the request's model's prices (model, "" when admission did not read it), else those of the
// model the response names, else the highest; a Fields sum (header, body) costs its total.
func (u *Usage) Price(model string, used usage.Usage) int64 {
	if !u.ReadsFormat() {
		return min(used.Tokens.Sum(), algos.MaxCount)
	}
	if model == "" {
		model = used.Model
	}
	n, _ := u.price.forModel(model).Cost(used.Tokens)
	return min(n, algos.MaxCount)
}
