// Package stats holds the small summaries the benchmark programs share. It
// owns no I/O and no formatting.
package stats

import (
	"math"
	"sort"
)

// Median is the median of v, NaNs (failed runs) left out; NaN if none is left.
func Median(v []float64) float64 {
	w := []float64{}
	for _, x := range v {
		if !math.IsNaN(x) {
			w = append(w, x)
		}
	}
	if len(w) == 0 {
		return math.NaN()
	}
	sort.Float64s(w)
	if len(w)%2 == 1 {
		return w[len(w)/2]
	}
	return (w[len(w)/2-1] + w[len(w)/2]) / 2
}
