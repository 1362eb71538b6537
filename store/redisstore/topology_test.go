package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/store/redisstore"
)

// The topology tests run concurrent decisions through Store on real Redis deployments
// (Sentinel, Redis Cluster, TLS, ACL users) made by internal/redistest, and fail Redis over in
// the middle of the load.
//
// What a failover can cost: Redis replicates asynchronously, so a master that is replaced may
// have acknowledged writes its replica never has: the last ones before a crash, or, with
// SENTINEL FAILOVER, all those it took between the replica's promotion and the clients'
// switch. The promoted replica then holds fewer admissions than the clients were told, and an
// identity can be admitted more than its limit.
// The failover tests measure exactly that, by deciding with a limit whose Redis state names
// every admission it holds (see failoverLoad), and assert what is guaranteed: Redis's state
// never exceeds the limit, an identity is admitted beyond its limit only by as many
// admissions as were lost, only the failed master's identities lose any, and a coordinated
// failover (CLUSTER FAILOVER) loses none.

const (
	loadKeys    = 48              // identities of a failover load
	loadLimit   = 20              // admissions per identity for the whole test
	loadWorkers = 8               // goroutines deciding at once
	loadTimeout = 2 * time.Second // per decision: generous, so that a busy machine causes no errors
)

// outcome is one decision of a load.
type outcome struct {
	key         int
	id          int64 // the lease taken: unique, so Redis's state says which admissions it kept
	start, done time.Time
	allowed     bool
	err         error
}

// failoverRun is what a failover load saw.
type failoverRun struct {
	outcomes   []outcome
	began, end time.Time // the failover: called, returned
	held       [][]int64 // per identity, the leases Redis holds at the end
	final      []error   // per identity, the error of a last sequential decision (nil: denied, as it must be)
}

// failoverLoad decides on loadKeys identities (prefix + number) from loadWorkers goroutines,
// under a concurrency limit of loadLimit leases that expire in an hour and are never given
// back, each request taking a fresh lease ID: an exact limit of loadLimit admissions per
// identity for the whole test, whose Redis state (a sorted set of lease IDs) names each
// admission it holds. Once a third of the capacity is used, it calls failover, keeps deciding
// until every identity has been denied by a decision that started after failover returned (so
// the new master has seen every identity at its limit), stops, decides once more on each
// identity one at a time, and reads the leases Redis holds.
func failoverLoad(t *testing.T, c redis.UniversalClient, o redisstore.Options, prefix string, failover func(context.Context) error) *failoverRun {
	t.Helper()
	s := redisstore.New(c, o)
	lease := mustAlg(algos.NewConcurrency(loadLimit, algos.Hour))
	var (
		decided, nextID atomic.Int64
		after           atomic.Int64 // when failover returned, UnixNano; 0 before
		deniedAfter     [loadKeys]atomic.Bool
		wg              sync.WaitGroup
		stopOnce        sync.Once
		stop            = make(chan struct{})
		outs            = make([][]outcome, loadWorkers)
	)
	halt := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	defer halt()
	for w := range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				o := outcome{key: rng.IntN(loadKeys), id: nextID.Add(1), start: time.Now()}
				ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
				d, err := s.DecideOne(ctx, prefix+strconv.Itoa(o.key), lease, algos.Request{Cost: 1, ID: o.id})
				cancel()
				o.done, o.allowed, o.err = time.Now(), err == nil && d.Allowed, err
				outs[w] = append(outs[w], o)
				decided.Add(1)
				// A pause between decisions keeps the load to a few thousand a second: enough
				// to catch every failover's effects, cheap on a shared machine while a
				// failover takes seconds.
				time.Sleep(2 * time.Millisecond)
				if err != nil {
					continue
				}
				if a := after.Load(); !d.Allowed && a != 0 && o.start.UnixNano() > a {
					deniedAfter[o.key].Store(true)
				}
			}
		}()
	}
	waitUntil(t, "a third of the capacity used", func() bool { return decided.Load() >= loadKeys*loadLimit/3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &failoverRun{began: time.Now()}
	if err := failover(ctx); err != nil {
		t.Fatalf("failover: %v", err)
	}
	r.end = time.Now()
	after.Store(r.end.UnixNano())
	waitUntil(t, "every identity denied after the failover", func() bool {
		for i := range deniedAfter {
			if !deniedAfter[i].Load() {
				return false
			}
		}
		return true
	})
	halt()
	for _, o := range outs {
		r.outcomes = append(r.outcomes, o...)
	}
	for k := range loadKeys {
		key := prefix + strconv.Itoa(k)
		d, err := s.DecideOne(ctx, key, lease, algos.Request{Cost: 1, ID: nextID.Add(1)})
		if err == nil && d.Allowed {
			err = fmt.Errorf("allowed: %+v", d)
		}
		r.final = append(r.final, err)
		state, _ := s.Keys(key)
		members, err := c.ZRange(ctx, state, 0, -1).Result()
		if err != nil {
			t.Fatalf("read the leases of %s: %v", key, err)
		}
		var ids []int64
		for _, m := range members {
			id, err := strconv.ParseInt(strings.TrimSuffix(m, ":1"), 10, 64)
			if err != nil {
				t.Fatalf("%s holds member %q, want ID:1", state, m)
			}
			ids = append(ids, id)
		}
		r.held = append(r.held, ids)
	}
	return r
}

// check asserts what a failover load must show and logs what it measured. failed says which
// identities lived on the master that failed; lossless says the failover was coordinated and
// may lose nothing.
func (r *failoverRun) check(t *testing.T, name string, failed func(key int) bool, lossless bool) {
	t.Helper()
	admitted := make([]map[int64]outcome, loadKeys)
	errored := make([]map[int64]bool, loadKeys)
	for k := range loadKeys {
		admitted[k], errored[k] = map[int64]outcome{}, map[int64]bool{}
	}
	var total, errs, errsFailed, errsAfter int
	var firstErr, lastErr time.Time
	for _, o := range r.outcomes {
		total++
		switch {
		case o.err != nil:
			errored[o.key][o.id] = true
			errs++
			if failed(o.key) {
				errsFailed++
			}
			if o.start.After(r.end) {
				errsAfter++
			}
			if firstErr.IsZero() || o.done.Before(firstErr) {
				firstErr = o.done
			}
			if o.done.After(lastErr) {
				lastErr = o.done
			}
		case o.allowed:
			admitted[o.key][o.id] = o
		}
	}
	var lost, over, ghosts int
	for k := range loadKeys {
		if err := r.final[k]; err != nil {
			t.Errorf("identity %d: a decision after the load: %v, want a denial (the identity is at its limit)", k, err)
		}
		held := map[int64]bool{}
		for _, id := range r.held[k] {
			held[id] = true
			if _, ok := admitted[k][id]; ok {
				continue
			}
			if !errored[k][id] {
				t.Errorf("identity %d: Redis holds lease %d, which no decision on it took", k, id)
			}
			ghosts++ // run by Redis, though the client got an error (timeout, connection lost)
		}
		if len(held) > loadLimit {
			t.Errorf("identity %d: Redis holds %d leases, over the limit %d", k, len(held), loadLimit)
		}
		kLost := 0
		for id, o := range admitted[k] {
			if held[id] {
				continue
			}
			kLost++
			if !failed(k) {
				t.Errorf("identity %d: admission %d (done %v after the failover began) was lost, but its master did not fail", k, id, o.done.Sub(r.began))
			}
			if !o.done.Before(r.end) {
				t.Errorf("identity %d: admission %d, acknowledged after the failover completed, was lost", k, id)
			}
		}
		lost += kLost
		if n := len(admitted[k]) - loadLimit; n > 0 {
			over += n
			if n > kLost {
				t.Errorf("identity %d: %d admissions for a limit of %d, and only %d were lost", k, len(admitted[k]), loadLimit, kLost)
			}
		}
	}
	if lossless && lost > 0 {
		t.Errorf("%s: %d acknowledged admissions lost; this failover is coordinated and must lose none", name, lost)
	}
	outage := time.Duration(0)
	if !lastErr.IsZero() {
		outage = lastErr.Sub(r.began)
	}
	t.Logf("%s: %d decisions; failover took %v; %d errors (%d on the failed master's identities, %d of decisions started after the failover completed), the last %v after it began; %d admissions lost, %d over the limit, %d leases written though the client got an error",
		name, total, r.end.Sub(r.began).Round(time.Millisecond), errs, errsFailed, errsAfter, outage.Round(time.Millisecond), lost, over, ghosts)
}

// TestSentinelFailover: through a Sentinel client, decisions go on after the master is killed
// and a Sentinel promotes its replica, and after a failover asked of a Sentinel (SENTINEL
// FAILOVER) while the master runs. Neither is coordinated with the clients: both may lose
// acknowledged admissions, and the test measures how many; with WaitReplicas (WAIT 1 after each
// write), none may be lost. (A killed master leaves this set-up without a replica, so WAIT 1
// would fail every decision after it: WaitReplicas needs a replica more than it waits for.)
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failover func(*redistest.Sentinel, context.Context) (string, error)
		wait     int
	}{
		{"master killed", (*redistest.Sentinel).Failover, 0},
		{"SENTINEL FAILOVER", (*redistest.Sentinel).ManualFailover, 0},
		{"SENTINEL FAILOVER, WAIT 1", (*redistest.Sentinel).ManualFailover, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sn := redistest.StartSentinel(t)
			c, err := redisstore.Open(redisstore.Conn{Addrs: sn.SentinelAddrs, MasterName: sn.MasterName})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := failoverLoad(t, c, redisstore.Options{WaitReplicas: tc.wait, WaitTimeout: 100 * time.Millisecond}, "sentinel:", func(ctx context.Context) error {
				_, err := tc.failover(sn, ctx)
				return err
			})
			r.check(t, "sentinel, "+tc.name, func(int) bool { return true }, tc.wait > 0)
		})
	}
}

// TestClusterFailover: on a Redis Cluster of three masters with a replica each, identities
// spread over every master, and decisions go on through a coordinated failover (CLUSTER
// FAILOVER, which must lose nothing) and through a master's crash.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	rc := redistest.StartRedisCluster(t)
	c, err := redisstore.Open(redisstore.Conn{Addrs: rc.Addrs, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc := c.(*redis.ClusterClient)
	ctx := context.Background()
	s := redisstore.New(c, redisstore.Options{})
	for _, tc := range []struct {
		name     string
		prefix   string
		lossless bool
		failover func(ctx context.Context, master string) (string, error)
	}{
		{"cluster, CLUSTER FAILOVER", "manual:", true, rc.ManualFailover},
		{"cluster, master killed", "killed:", false, rc.KillMaster},
	} {
		// The slot map as it is now: the previous failover changed it.
		cc.ReloadState(ctx)
		masterOf := make([]string, loadKeys)
		seen := map[string]int{}
		for k := range masterOf {
			state, _ := s.Keys(tc.prefix + strconv.Itoa(k))
			m, err := cc.MasterForKey(ctx, state)
			if err != nil {
				t.Fatalf("%s: master of %s: %v", tc.name, state, err)
			}
			masterOf[k] = m.Options().Addr
			seen[masterOf[k]]++
		}
		if len(seen) != 3 {
			t.Fatalf("%s: the identities live on %d masters (%v), want all 3", tc.name, len(seen), seen)
		}
		victim := masterOf[0]
		r := failoverLoad(t, c, redisstore.Options{}, tc.prefix, func(ctx context.Context) error {
			_, err := tc.failover(ctx, victim)
			return err
		})
		r.check(t, tc.name, func(k int) bool { return masterOf[k] == victim }, tc.lossless)
		// Every master, the promoted replica included, holds some of the identities.
		masters, err := rc.Masters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range masters {
			mc := redis.NewClient(&redis.Options{Addr: m})
			n, err := mc.Keys(ctx, "diana:{"+tc.prefix+"*").Result()
			mc.Close()
			if err != nil || len(n) == 0 {
				t.Errorf("%s: master %s holds %d of the identities (%v), want some", tc.name, m, len(n), err)
			}
		}
	}
}

// TestTLS: a TLS server whose certificate a private CA signed is reached with that CA in
// Conn.CACert, and refused, with a clear error, with another CA, with the system's roots, or
// with a name the certificate does not have.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TLS: true})
	other := redistest.NewCA(t)
	for _, tc := range []struct {
		name    string
		conn    redisstore.Conn
		wantErr string // "": decisions work
	}{
		{"private CA", redisstore.Conn{TLS: true, CACert: srv.CA.PEM}, ""},
		{"private CA, server name localhost", redisstore.Conn{TLS: true, CACert: srv.CA.PEM, ServerName: "localhost"}, ""},
		{"another CA", redisstore.Conn{TLS: true, CACert: other.PEM}, "certificate signed by unknown authority"},
		{"system roots", redisstore.Conn{TLS: true}, "certificate signed by unknown authority"},
		{"wrong server name", redisstore.Conn{TLS: true, CACert: srv.CA.PEM, ServerName: "redis.example"}, "not redis.example"},
		{"skip verify", redisstore.Conn{TLS: true, SkipVerify: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.conn.Addrs = []string{srv.Addr}
			c, err := redisstore.Open(tc.conn)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			loadOrFail(t, c, tc.wantErr)
		})
	}
}

// TestMutualTLS: a server that asks for a client certificate admits a client presenting one
// its CA signed, and refuses one without, or with a certificate another CA signed.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TLS: true, ClientAuth: true})
	otherCert, otherKey := redistest.NewCA(t).Issue(t, "diana-client")
	for _, tc := range []struct {
		name    string
		conn    redisstore.Conn
		wantErr string // "": decisions work
	}{
		{"client certificate", redisstore.Conn{TLS: true, CACert: srv.CA.PEM, ClientCert: srv.ClientCert, ClientKey: srv.ClientKey}, ""},
		// TLS 1.3 checks the client after the handshake: the error is the server's alert or the
		// connection it closed.
		{"no client certificate", redisstore.Conn{TLS: true, CACert: srv.CA.PEM}, "redisstore: "},
		{"another CA's client certificate", redisstore.Conn{TLS: true, CACert: srv.CA.PEM, ClientCert: otherCert, ClientKey: otherKey}, "redisstore: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.conn.Addrs = []string{srv.Addr}
			c, err := redisstore.Open(tc.conn)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			loadOrFail(t, c, tc.wantErr)
		})
	}
}

// TestBadCACert: a CA that is not PEM, or a CA without TLS, is refused by Open with an error
// naming the field; NewClient's client then fails every command with that error.
func TestBadCACert(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn redisstore.Conn
		want string
	}{
		{"not PEM", redisstore.Conn{TLS: true, CACert: []byte("not a certificate")}, "Conn.CACert: no PEM certificate found"},
		{"without TLS", redisstore.Conn{CACert: redistest.NewCA(t).PEM}, "Conn.CACert is set but TLS is off"},
		{"client certificate without TLS", redisstore.Conn{ClientCert: []byte("x")}, "Conn.ClientCert is set but TLS is off"},
		{"client certificate without key", redisstore.Conn{TLS: true, ClientCert: redistest.NewCA(t).PEM}, "Conn.ClientCert and ClientKey"},
		{"key of another certificate", redisstore.Conn{TLS: true, ClientCert: mustIssue(t)[0], ClientKey: mustIssue(t)[1]}, "Conn.ClientCert and ClientKey: tls: private key does not match public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.conn.Addrs = []string{"127.0.0.1:1"}
			if _, err := redisstore.Open(tc.conn); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want an error with %q", err, tc.want)
			}
			c := redisstore.NewClient(tc.conn)
			defer c.Close()
			if err := c.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewClient, then PING: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestACL: an ACL user limited to Diana's keys decides; so does the least-privilege user
// docs/redis.md gives (TestDocUser runs all else as it). A wrong password, no user, and a user
// whose keys do not cover Diana's prefix get clear errors.
func TestACL(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Users: []string{
		"keys on >s3cret ~diana:* +@all",
		redistest.DocUser(t),
		"elsewhere on >pw ~other:* +@all",
	}})
	for _, tc := range []struct {
		name, user, pass string
		wantErr          string // "": decisions work
	}{
		{"key prefix user", "keys", "s3cret", ""},
		{"least privilege", "diana", "secret", ""},
		{"wrong password", "diana", "wrong", "WRONGPASS"},
		{"no user", "", "", "NOAUTH"},
		{"other keys", "elsewhere", "pw", "NOPERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisstore.Open(redisstore.Conn{Addrs: []string{srv.Addr}, Username: tc.user, Password: tc.pass})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			loadOrFail(t, c, tc.wantErr)
		})
	}
}

// loadOrFail runs exactLoad on c when wantErr is empty; otherwise it checks that a decision
// fails with an error holding wantErr.
func loadOrFail(t *testing.T, c redis.UniversalClient, wantErr string) {
	t.Helper()
	if wantErr == "" {
		exactLoad(t, c)
		return
	}
	_, err := redisstore.New(c, redisstore.Options{}).DecideOne(context.Background(), "k", mustAlg(algos.NewGCRA(1, algos.Second, 1)), algos.Request{Cost: 1})
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("Decide: %v, want an error with %q", err, wantErr)
	}
	t.Logf("%v", err)
}

// exactLoad runs concurrent decisions on a few identities under each of three exact limits
// (GCRA, sliding log, concurrency), 3 times the limit per identity, and checks that none fails
// and that each identity was admitted exactly its limit. Identities are named after the test, as
// subtests share a server.
func exactLoad(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	const limit, keys, workers = 10, 4, 6
	s := redisstore.New(c, redisstore.Options{})
	algs := []struct {
		name string
		alg  algos.Algorithm
	}{
		{"gcra", mustAlg(algos.NewGCRA(1, algos.Hour, limit))},
		{"sliding_log", mustAlg(algos.NewSlidingLog(limit, algos.Hour))},
		{"concurrency", mustAlg(algos.NewConcurrency(limit, algos.Hour))},
	}
	var nextID atomic.Int64
	var mu sync.Mutex
	admitted := map[string]int{}
	var errs []error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range limit * 3 / workers {
				for _, a := range algs {
					for k := range keys {
						key := t.Name() + ":" + a.name + ":" + strconv.Itoa(k)
						ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
						d, err := s.DecideOne(ctx, key, a.alg, algos.Request{Cost: 1, ID: nextID.Add(1)})
						cancel()
						mu.Lock()
						if err != nil {
							errs = append(errs, err)
						} else if d.Allowed {
							admitted[key]++
						}
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d decisions failed, the first: %v", len(errs), errs[0])
	}
	for _, a := range algs {
		for k := range keys {
			if key := t.Name() + ":" + a.name + ":" + strconv.Itoa(k); admitted[key] != limit {
				t.Errorf("%s admitted %d, want exactly the limit %d", key, admitted[key], limit)
			}
		}
	}
}

// waitUntil polls cond every 10 ms for up to 30 s: what it waits for takes a few seconds at
// most, so only a broken deployment runs out of time.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

func mustAlg[A algos.Algorithm](a A, err error) algos.Algorithm {
	if err != nil {
		panic(err)
	}
	return a
}

// mustIssue returns a certificate and its key, signed by a new CA.
func mustIssue(t *testing.T) [2][]byte {
	c, k := redistest.NewCA(t).Issue(t, "diana-client")
	return [2][]byte{c, k}
}
