package algos

import "testing"

func TestLeaseLife(t *testing.T) {
	fw, _ := NewFixedWindow(10, Second)
	sw, _ := NewSlidingWindow(10, Second)
	sl, _ := NewSlidingLog(10, Second)
	lf, _ := fw.Batching(0)
	ls, _ := sw.Batching(0)
	ll, _ := sl.Batching(0)
	tests := []struct {
		name          string
		l             *Batching
		d             Decision
		elapsed       int64
		life, leftNow int64
	}{
		// A fixed window's grant 300 ms before its end: units live 300 ms; asked again 500 ms
		// later, the next window has 800 ms left.
		{"fixed window", lf, Decision{ResetAfter: 300 * Millisecond}, 500 * Millisecond, 300 * Millisecond, 800 * Millisecond},
		{"fixed window, MaxAge first", lf, Decision{ResetAfter: 300 * Millisecond}, 0, 300 * Millisecond, 300 * Millisecond},
		// A sliding window's ResetAfter runs to the end of the next window.
		{"sliding window", ls, Decision{ResetAfter: Second + 50*Millisecond}, 0, 50 * Millisecond, 50 * Millisecond},
		{"sliding window, several windows later", ls, Decision{ResetAfter: Second + 50*Millisecond}, 3*Second + 60*Millisecond, 50 * Millisecond, 100 * Millisecond},
		{"sliding log", ll, Decision{ResetAfter: 5 * Millisecond}, 0, 100 * Millisecond, 100 * Millisecond},
		{"no grant yet", lf, Decision{}, 0, 0, Second},
	}
	for _, tt := range tests {
		if got := tt.l.Life(tt.d); got != tt.life {
			t.Errorf("%s: Life = %d, want %d", tt.name, got, tt.life)
		}
		if got := tt.l.Left(tt.d, tt.elapsed); got != tt.leftNow {
			t.Errorf("%s: Left = %d, want %d", tt.name, got, tt.leftNow)
		}
	}
}

func TestBucketLease(t *testing.T) {
	tests := []struct {
		name                     string
		rate, period, burst, age int64
		least                    int64
		wantBurst, wantAge       int64
		wantErr                  bool
	}{
		{"default: a tenth of the burst", 100, Second, 200, 0, 1, 180, 200 * Millisecond, false},
		{"default: at least one unit", 1, Minute, 5, 0, 1, 4, Minute, false},
		{"age rounds the units up", 100, Second, 200, 15 * Millisecond, 1, 198, 15 * Millisecond, false},
		{"longest age", 10, Second, 10, 900 * Millisecond, 1, 1, 900 * Millisecond, false},
		{"too long", 10, Second, 10, 901 * Millisecond, 1, 0, 0, true},
		{"burst of one", 10, Second, 1, 0, 1, 0, 0, true},
		{"leaky bucket may keep no burst", 10, Second, 1, 0, 0, 0, 100 * Millisecond, false},
		{"huge figures do not overflow", MaxSafe / 4, 1, 1, 1, 0, 0, 0, true},
		{"negative age", 10, Second, 10, -1, 1, 0, 0, true},
	}
	for _, tt := range tests {
		burst, age, err := bucketBatch("x", tt.rate, tt.period, tt.burst, tt.least, tt.age)
		if (err != nil) != tt.wantErr || burst != tt.wantBurst || age != tt.wantAge {
			t.Errorf("%s: burst %d, age %d, err %v; want %d, %d, error %v", tt.name, burst, age, err, tt.wantBurst, tt.wantAge, tt.wantErr)
		}
	}
}
