package algotest

// A Contract is what a limit promises about the times (µs, ascending) of the units it admits;
// it returns the largest excess over the promise, 0 when it is kept.
type Contract func(admitted []int64) int64

// PerWindow: at most limit units in each aligned window (a fixed window's promise, and what the
// sliding window's estimate keeps too).
func PerWindow(limit, window int64) Contract {
	return func(ts []int64) int64 {
		count := map[int64]int64{}
		worst := int64(0)
		for _, t := range ts {
			count[t/window]++
			worst = max(worst, count[t/window]-limit)
		}
		return worst
	}
}

// Sliding: at most limit units in any window (t − window, t] (the sliding log's promise).
func Sliding(limit, window int64) Contract {
	return func(ts []int64) int64 {
		worst := int64(0)
		for i, j := 0, 0; j < len(ts); j++ {
			for ts[i] <= ts[j]-window {
				i++
			}
			worst = max(worst, int64(j-i+1)-limit)
		}
		return worst
	}
}

// Bucket: at most burst + ⌊x·rate/period⌋ units in any closed interval of length x (a token
// bucket's promise, and a leaky bucket's with burst + 1).
func Bucket(rate, period, burst int64) Contract {
	return func(ts []int64) int64 {
		worst := int64(0)
		for i := range ts {
			for j := i; j < len(ts); j++ {
				worst = max(worst, int64(j-i+1)-(burst+(ts[j]-ts[i])*rate/period))
			}
		}
		return worst
	}
}
