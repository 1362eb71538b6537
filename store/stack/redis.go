package stack

import (
	"fmt"
	"time"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/redisstore"
)

// Redis is cluster mode's settings as every front end states them: how to reach Redis (Conn),
// the keys' prefix, WAIT, the decision's timeout and the breaker. dianad's redis section and the
// Kong plugin's redis_* fields both fill it; New builds the stack from it. A zero field takes its
// default.
type Redis struct {
	redisstore.Conn
	// CAFile, CertFile and KeyFile name the PEM files of Conn.CACert, ClientCert and ClientKey,
	// for a front end that reads them itself (dianad at every reload, Kong when it connects); New
	// uses only the Conn's bytes.
	CAFile, CertFile, KeyFile string
	Prefix                    string        // of every key; default redisstore.DefaultPrefix
	Wait                      int           // replicas a decision's write must reach before it counts (WAIT); 0: none
	Timeout                   time.Duration // bound on one decision's round trip; WAIT gets 3/4 of it
	Failures                  int           // consecutive failed round trips that open the breaker
	OpenFor                   time.Duration // how long the breaker stays open before a probe
}

// The defaults and bounds of the settings, stated here once: dianad's decoder, its JSON schema
// (by a test), the Kong plugin's field table and the docs (by a test) take them from here.
const (
	DefaultPrefix   = redisstore.DefaultPrefix
	DefaultTimeout  = failover.DefaultTimeout
	DefaultFailures = failover.DefaultFailures
	DefaultOpenFor  = failover.DefaultOpenFor

	MinTimeout, MaxTimeout = time.Millisecond, time.Minute
	MinOpenFor, MaxOpenFor = time.Millisecond, time.Hour
	MaxFailures            = 1000
	MaxWait                = 16      // replicas WAIT may wait for
	MaxDB                  = 1 << 20 // dianad's bound on the database number
)

// Conflict is a pair of settings that cannot go together.
type Conflict int

const (
	// ClusterWithSentinel is Cluster with a MasterName: the addresses are Sentinels.
	ClusterWithSentinel Conflict = iota
	// WaitOnCluster is Wait on a Redis Cluster (Cluster, or several addresses without a
	// MasterName): WAIT has no key to be routed by.
	WaitOnCluster
)

// Conflicts reports each conflict of r's settings to f, in order. With drop, the setting that
// conflicts is cleared before the next check (Cluster, Wait): a front end that ignores such a
// setting with a warning (Kong) drops it; one that refuses it (dianad) reports every conflict.
func (r *Redis) Conflicts(drop bool, f func(Conflict)) {
	if r.Cluster && r.MasterName != "" {
		f(ClusterWithSentinel)
		if drop {
			r.Cluster = false
		}
	}
	if r.Wait > 0 && (r.Cluster || len(r.Addrs) > 1 && r.MasterName == "") {
		f(WaitOnCluster)
		if drop {
			r.Wait = 0
		}
	}
}

// TLSFile is one of the PEM files of Redis: CAFile, CertFile or KeyFile.
type TLSFile int

const (
	CAFile TLSFile = iota
	CertFile
	KeyFile
)

// ReadFiles reads the PEM files CAFile, CertFile and KeyFile name into Conn's CACert,
// ClientCert and ClientKey, each a regular file bounded as config.MaxCA; it reports each file
// that cannot be read to fail, leaving its bytes nil. Whether the PEM is usable is
// Conn.TLSConfig's to say.
func (r *Redis) ReadFiles(fail func(f TLSFile, err error)) {
	for f, file := range [...]struct {
		name string
		into *[]byte
	}{CAFile: {r.CAFile, &r.CACert}, CertFile: {r.CertFile, &r.ClientCert}, KeyFile: {r.KeyFile, &r.ClientKey}} {
		if file.name == "" {
			continue
		}
		var err error
		if *file.into, err = config.ReadRegular(file.name, config.MaxCA); err != nil {
			*file.into = nil
			fail(TLSFile(f), err)
		}
	}
}

// Key is a comparable form of r, every setting included: equal settings share one stack (the
// Kong plugin keeps one per distinct connection).
func (r *Redis) Key() string { return fmt.Sprintf("%#v", *r) }
