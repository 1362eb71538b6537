package bench

import "testing"

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want Spread
	}{
		{[]float64{3}, Spread{3, 3, 3}},
		{[]float64{5, 1, 3}, Spread{3, 1, 5}},
		{[]float64{4, 1, 2, 8}, Spread{3, 1, 8}},
	} {
		if got := SpreadOf(tc.v); got != tc.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", tc.v, got, tc.want)
		}
	}
	if got := (Spread{1.234, 0.5, 2}).String(); got != "1.23 (0.50–2.00)" {
		t.Errorf("String = %q", got)
	}
}
