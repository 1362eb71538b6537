package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/algos/scripts"
)

// With Options.AutoPipeline (or a build with the tag diana_autopipeline), concurrent decisions
// share round trips through go-redis's auto-pipeliner (AsyncAutoPipeline, experimental in
// v9.22) instead of the coalescer: a DecideAll whose calls make one script call (one decision,
// or a run of one algorithm in its batch script) submits it to the pipeliner, which sends it
// in the next pipeline with the other goroutines' commands. Its default options keep one
// ordered stream: one pipeline under way at a time, commands in submit order, so one caller's
// calls on one key stay in order. A DecideAll of several script calls sends its own pipeline,
// as before: the pipeliner has no way to submit several commands at once, and they would
// otherwise be split between round trips. Not with WaitReplicas (WAIT must follow the writes on
// their connection, and the pipeliner sends WAIT on another) nor on a Cluster (see
// coalesce.go).
//
// The pipeliner runs its batches on its own context: a caller whose ctx ends first stops
// waiting (AutoFuture.WaitContext) and gets ctx's error, as the coalescer's queued callers do;
// the command may still be applied by Redis, as after any timeout. It retries nothing after
// NOSCRIPT on the deferred face: sendAuto sends EVAL itself.

// autoPipeliner returns c's auto-pipeliner when o asks for it and the store may use it, else nil.
func autoPipeliner(c redis.UniversalClient, o Options, cluster bool) *redis.AutoPipeliner {
	if !(o.AutoPipeline || autoPipelineTag) || c == nil || cluster || o.WaitReplicas > 0 {
		return nil
	}
	ap, err := c.AsyncAutoPipelineWithOptions(redis.DefaultAutoPipelineOptions())
	if err != nil { // a closed client: plain pipelines then fail as they would
		return nil
	}
	return ap
}

// sendAuto sends c, the one script call of calls, through the auto-pipeliner, and with EVAL
// after NOSCRIPT. It reports false when ctx ended first: c's calls then have ctx's error.
func (s *Store) sendAuto(ctx context.Context, calls []Call, c *command) bool {
	c.cmd = scriptCmd(ctx, "evalsha", c.script().Hash(), c.keys, c.args)
	err := s.ap.Submit(ctx, c.cmd).WaitContext(ctx)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		src, _ := scripts.Source(c.e.name)
		if c.n > 1 {
			src, _ = scripts.Batch(c.e.name)
		}
		c.cmd, c.retried = scriptCmd(ctx, "eval", src, c.keys, c.args), true
		err = s.ap.Submit(ctx, c.cmd).WaitContext(ctx)
	}
	if cerr := ctx.Err(); cerr == nil || err != cerr {
		return true
	}
	// The command may still be under way: its reply is not read.
	for i := c.first; i < c.first+c.n; i++ {
		call := &calls[i]
		call.Dec, call.Err, call.At = algos.Decision{}, fmt.Errorf("redisstore: %s on %q: %w", c.e.name, call.Key, err), 0
	}
	return false
}

// scriptCmd is the command EVAL or EVALSHA (name) of payload on keys with args.
func scriptCmd(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	cmd.SetFirstKeyPos(3)
	return cmd
}
