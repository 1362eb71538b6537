package bench

import (
	"fmt"
	"slices"
)

// ProxyReport is what bench/proxyload measured (its -json), which the performance page reads.
type ProxyReport struct {
	Command string        `json:"command"`
	Machine Machine       `json:"machine"`
	Driver  string        `json:"driver"` // e.g. "wrk -t 2 -c 32"
	Seconds float64       `json:"seconds_per_run"`
	Rounds  int           `json:"rounds"`
	Anchor  string        `json:"anchor"` // the name of the target the ratios divide by
	Targets []ProxyTarget `json:"targets"`
}

// ProxyTarget is one target's figures: the medians over the rounds, and the medians (with the
// smallest and largest) over the rounds of each figure divided by the anchor's in that round.
type ProxyTarget struct {
	Name      string     `json:"name"`
	About     string     `json:"about"`
	RPS       float64    `json:"rps"`
	P50       float64    `json:"p50_us"`
	P99       float64    `json:"p99_us"`
	CPU       float64    `json:"cpu_us_req"`
	Driver    float64    `json:"driver_cores"` // the cores the load generator used, on average
	RPSRatio  Spread     `json:"rps_ratio"`
	P99Ratio  Spread     `json:"p99_ratio"`
	CPURatio  Spread     `json:"cpu_ratio"`
	RoundRuns []ProxyRun `json:"rounds"`
}

// ProxyRun is what one run of the load against one target measured.
type ProxyRun struct {
	Requests  int     `json:"requests"`
	Seconds   float64 `json:"seconds"`
	RPS       float64 `json:"rps"`
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	Errors    int     `json:"errors"`       // connection errors, timeouts and answers other than 200
	TargetCPU float64 `json:"cpu_us_req"`   // the target's CPU µs per request (its workers' included)
	DriverCPU float64 `json:"driver_cores"` // the cores the load generator used, on average
}

// Spread is the median, smallest and largest of a figure over several runs.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// SpreadOf returns the spread of v (not empty); the median of an even count is the mean of the
// middle two.
func SpreadOf(v []float64) Spread {
	v = slices.Clone(v)
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Spread{m, v[0], v[len(v)-1]}
}

// String is the spread as "median (min–max)", to 2 decimals.
func (s Spread) String() string { return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Median, s.Min, s.Max) }
