package faultmatrix

import (
	"context"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/internal/slowproxy"
)

// Fault is one way Redis fails: one row of the matrix per policy.
type Fault struct {
	Name  string
	About string // what happens, for the report
	// degrades is set when Redis cannot decide during the fault, so that the fail policy must
	// decide some requests.
	degrades bool
	// instant is set for a fault that is one event (a restart): it lasts as long as inject,
	// and heal does nothing.
	instant bool
	// inReduced lists the policies of the reduced matrix under this fault.
	inReduced []string
	// setup starts a healthy Redis for one cell, ended when t ends.
	setup func(t *testing.T) *redis
}

// redis is the Redis of one cell, and how to break and heal it.
type redis struct {
	target       Target
	inject, heal func()
}

func (f Fault) reduced(policy string) bool {
	for _, p := range f.inReduced {
		if p == policy {
			return true
		}
	}
	return false
}

// Faults returns the matrix's faults, in the order of the table.
func Faults() []Fault {
	return []Fault{
		{
			Name:      "killed",
			About:     "redis-server is killed (SIGKILL): connections are refused until it is started again, empty, when the fault ends",
			degrades:  true,
			inReduced: []string{"open"},
			setup: func(t *testing.T) *redis {
				rs := redistest.Start(t)
				return &redis{Target{Addrs: []string{rs.Addr}}, rs.Stop, rs.Restart}
			},
		},
		{
			Name:      "paused",
			About:     "redis-server is stopped (SIGSTOP): it accepts connections and never answers, until SIGCONT; its data is kept",
			degrades:  true,
			inReduced: []string{"open", "closed"},
			setup: func(t *testing.T) *redis {
				rs := redistest.Start(t)
				return &redis{Target{Addrs: []string{rs.Addr}}, rs.Pause, rs.Resume}
			},
		},
		slowed(20*time.Millisecond, false, "open"),
		slowed(200*time.Millisecond, true, "open", "local"),
		{
			Name:      "restarted",
			About:     "redis-server is killed and started again at once, empty: data and loaded scripts are lost",
			instant:   true,
			inReduced: []string{"open"},
			setup: func(t *testing.T) *redis {
				rs := redistest.Start(t)
				return &redis{Target{Addrs: []string{rs.Addr}}, rs.Restart, func() {}}
			},
		},
		{
			Name: "failed over",
			About: "Sentinel failover: the master is killed (SIGKILL); the three Sentinels notice after " +
				redistest.SentinelDownAfter.String() + " and promote its replica; the fault lasts until they all report the new master",
			degrades:  true,
			instant:   true,
			inReduced: []string{"open"},
			setup: func(t *testing.T) *redis {
				s := redistest.StartSentinel(t)
				failover := func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					if _, err := s.Failover(ctx); err != nil {
						t.Fatalf("failover: %v", err)
					}
				}
				return &redis{Target{Addrs: s.SentinelAddrs, MasterName: s.MasterName}, failover, func() {}}
			},
		},
	}
}

// slowed is the fault of a Redis reached through a proxy that delays every reply by d.
// degrades says whether d is beyond the Redis timeout.
func slowed(d time.Duration, degrades bool, reduced ...string) Fault {
	about := "every reply of Redis arrives " + d.String() + " late (a TCP proxy holds it back): "
	if degrades {
		about += "beyond the 50ms timeout"
	} else {
		about += "within the 50ms timeout"
	}
	return Fault{
		Name:      "slowed " + d.String(),
		About:     about,
		degrades:  degrades,
		inReduced: reduced,
		setup: func(t *testing.T) *redis {
			rs := redistest.Start(t)
			p, err := slowproxy.New(rs.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return &redis{Target{Addrs: []string{p.Addr()}}, func() { p.SetDelay(d) }, func() { p.SetDelay(0) }}
		},
	}
}
