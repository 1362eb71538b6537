package faultmatrix

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		d := make([]time.Duration, len(ns))
		for i, n := range ns {
			d[i] = time.Duration(n) * time.Millisecond
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100, 99, ..., 1: unsorted
	}
	tests := []struct {
		name string
		d    []time.Duration
		p    int
		want time.Duration
	}{
		{"none", nil, 99, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p90 of 100", ms(hundred...), 90, 90 * time.Millisecond},
		{"p99 of 3", ms(3, 1, 2), 99, 3 * time.Millisecond},
		{"p50 of 4", ms(4, 3, 2, 1), 50, 2 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.d, tt.p); got != tt.want {
			t.Errorf("%s: percentile %d = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

// TestMeasure computes a row from known samples.
func TestMeasure(t *testing.T) {
	t0 := time.Now()
	healed := t0.Add(time.Second)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var samples []sample
	add := func(phase, client, startMS, tookMS int, out Outcome) {
		samples = append(samples, sample{phase: phase, client: client, start: at(startMS),
			took: time.Duration(tookMS) * time.Millisecond, out: out})
	}
	add(baseline, 0, 0, 3, Outcome{Status: 200, Redis: true})
	add(baseline, 1, 10, 5, Outcome{Status: 500})
	// Client 0 of the fault is admitted Limit+2 times by the policy, client 1 once by Redis
	// then denied by the policy; one request gets no answer.
	for i := range Limit + 2 {
		add(faulty, 0, 300+i, 1, Outcome{Status: 200})
	}
	add(faulty, 1, 400, 2, Outcome{Status: 200, Redis: true})
	add(faulty, 1, 401, 2, Outcome{Status: 429})
	add(faulty, 2, 402, 50, Outcome{Err: errors.New("broken")})
	// Redis decides again: the first Redis decision that ends after the fault counts, even if
	// it started before.
	add(after, 0, 1200, 1, Outcome{Status: 200, Redis: true})
	add(faulty, 3, 990, 20, Outcome{Status: 200, Redis: true})
	add(after, 0, 1001, 1, Outcome{Status: 200})

	row := measure(samples, healed)
	want := Row{Sent: Limit + 6, Answered: Limit + 5, Failed: 2, ByPolicy: Limit + 3,
		BaselineP99: 5 * time.Millisecond, FaultP99: 50 * time.Millisecond, Recovery: 10 * time.Millisecond,
		Admitted: Limit + 4, Over: 2}
	if row != want {
		t.Errorf("measure:\n got %+v\nwant %+v", row, want)
	}

	if row := measure(samples[:2], healed); row.Recovery != -1 || row.Sent != 0 {
		t.Errorf("no recovery: %+v, want Recovery -1 and nothing sent", row)
	}
}

func TestAppendTable(t *testing.T) {
	out := filepath.Join(t.TempDir(), "faults.md")
	rows := []Row{{FrontEnd: "dianad", Fault: "paused", Policy: "open", Lasted: 700 * time.Millisecond, Sent: 10, Answered: 10, ByPolicy: 9,
		BaselineP99: 1500 * time.Microsecond, FaultP99: 52 * time.Millisecond, Recovery: -1, Admitted: 10}}
	for _, fe := range []string{"dianad", "Kong plugin"} {
		if err := appendTable(out, fe, rows); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"### dianad\n", "### Kong plugin\n",
		"| dianad | paused | open | 700 ms | 10/10 (100%) | 0 | 9 | 1.5 ms | 52 ms | none within 20s | +0 (10 admitted, limit 4×30) |\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "| front end |"); n != 2 {
		t.Errorf("%d tables, want one per call", n)
	}
}
