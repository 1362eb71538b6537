package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes the machine a benchmark ran on.
type Machine struct {
	CPU   string `json:"cpu"`   // the model name of /proc/cpuinfo ("unknown" without one)
	Cores int    `json:"cores"` // runtime.NumCPU
	Go    string `json:"go"`    // the Go version the measuring program was built with
	Load  string `json:"load"`  // the 1, 5 and 15-minute load averages of /proc/loadavg when asked
}

// ThisMachine returns the machine this program runs on, its load average as of now.
func ThisMachine() Machine {
	m := Machine{CPU: "unknown", Cores: runtime.NumCPU(), Go: runtime.Version(), Load: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	return m
}

// String is the machine line of a report.
func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores, %s, load average %s (1, 5, 15 min) at the start", m.CPU, m.Cores, m.Go, m.Load)
}
