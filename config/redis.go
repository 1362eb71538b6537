package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisTimeout bounds one GET when Redis.Timeout is zero. The client's own timeouts
// apply too; the context deadline only counts if the client has ContextTimeoutEnabled.
const DefaultRedisTimeout = 5 * time.Second

// Redis watch timing: how long a silent subscription may stay quiet before a PING checks it,
// and the bounds of the backoff between attempts to subscribe again.
const (
	redisHealthInterval = 15 * time.Second
	redisMinBackoff     = 100 * time.Millisecond
	redisMaxBackoff     = 5 * time.Second
)

// Redis is a Remote that reads a document from a Redis key, and a Watcher that listens on a
// pub/sub channel whose messages announce a change: any message makes the loader fetch again.
// Publishers SET the key, then PUBLISH anything on the channel.
//
// Fetch reads the key (its first MaxSize+1 bytes): a missing key is an error wrapping
// ErrNoConfig, a value larger than MaxSize an error, and a value equal to the last one returned
// is reported unchanged.
//
// Watch subscribes to Channel and, after an error, subscribes again with a jittered backoff
// from 100ms to 5s. It notifies on every message, on every (re)subscription (a change may have
// been missed meanwhile) and when the subscription is lost (the key may be unreachable now).
// A subscription that stays silent is checked with PING every 15s. The loader's polling goes
// on regardless, as a safety net. With no Channel, Watch does nothing.
//
// Set the fields before the first Fetch and do not change them after.
type Redis struct {
	Client  redis.UniversalClient
	Key     string
	Channel string        // pub/sub channel announcing changes; "" for polling only
	Timeout time.Duration // bounds each GET; DefaultRedisTimeout if zero

	mu   sync.Mutex
	last []byte // the value the last successful Fetch returned
	have bool
}

// Name returns "redis " and the key.
func (r *Redis) Name() string { return "redis " + r.Key }

// Fetch gets the document; see Redis.
func (r *Redis) Fetch(ctx context.Context) ([]byte, bool, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultRedisTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// GETRANGE reads at most MaxSize+1 bytes, so that a huge value costs no more than a document
	// one byte too large; EXISTS, in the same transaction, tells a missing key from an empty one.
	var exists *redis.IntCmd
	var value *redis.StringCmd
	_, err := r.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, r.Key)
		value = p.GetRange(ctx, r.Key, 0, MaxSize)
		return nil
	})
	if err == nil && exists.Val() == 0 {
		return nil, false, fmt.Errorf("redis GET %s: %w", r.Key, ErrNoConfig)
	}
	if err != nil {
		return nil, false, fmt.Errorf("redis GET %s: %w", r.Key, err)
	}
	data := []byte(value.Val())
	if len(data) > MaxSize {
		return nil, false, fmt.Errorf("redis GET %s: document larger than %d bytes (4 MiB)", r.Key, MaxSize)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.have && bytes.Equal(data, r.last) {
		return nil, false, nil
	}
	r.last, r.have = data, true
	return data, true, nil
}

// Watch listens for change announcements until ctx ends; see Redis.
func (r *Redis) Watch(ctx context.Context, notify func()) {
	if r.Channel == "" {
		<-ctx.Done()
		return
	}
	backoff := redisMinBackoff
	for {
		if r.subscribe(ctx, notify) {
			backoff = redisMinBackoff
			if ctx.Err() == nil {
				notify()
			}
		}
		// Sleep between d/2 and d, so that many processes do not resubscribe in step.
		d := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		backoff = min(2*backoff, redisMaxBackoff)
	}
}

// subscribe holds one subscription until it fails or ctx ends, and reports whether it was
// established.
func (r *Redis) subscribe(ctx context.Context, notify func()) bool {
	ps := r.Client.Subscribe(ctx, r.Channel)
	defer ps.Close()
	// A blocked receive does not watch ctx: closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()

	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultRedisTimeout
	}
	if _, err := ps.ReceiveTimeout(ctx, timeout); err != nil {
		return false // the confirmation of SUBSCRIBE, or the error that prevents it
	}
	notify()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, redisHealthInterval)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged && ps.Ping(ctx) == nil {
				pinged = true // the PONG, or the next timeout, tells whether the link is alive
				continue
			}
			return true
		}
		pinged = false
		if _, ok := msg.(*redis.Message); ok {
			notify()
		}
	}
}

var (
	_ Remote  = (*Redis)(nil)
	_ Watcher = (*Redis)(nil)
	_ Remote  = (*HTTP)(nil)
)
