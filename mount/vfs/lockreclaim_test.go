package vfs

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSetSpan drives setSpan with seeded random locks and unlocks of one
// owner over a small file and compares the result with a byte map: each
// byte's type, and spans sorted, disjoint and merged.
func TestSetSpan(t *testing.T) {
	const size = 24 // bytes modelled; the last span may run to the end
	rng := rand.New(rand.NewPCG(24, 2))
	for run := 0; run < 300; run++ {
		var spans []heldSpan
		var model [size + 1]int8 // 0 none, 1 read, 2 write; model[size]: the bytes past it
		for op := 0; op < 12; op++ {
			off := uint64(rng.IntN(size))
			n := uint64(rng.IntN(size - int(off) + 1)) // 0: to the end
			kind := int8(rng.IntN(3))
			spans = setSpan(spans, spanOf(off, n, kind == 2), kind == 0)
			end := int(off + n)
			if n == 0 {
				end = size + 1
			}
			for b := int(off); b < end; b++ {
				model[b] = kind
			}
			got := [size + 1]int8{}
			for k, s := range spans {
				if s.start > s.end || k > 0 && (spans[k-1].end >= s.start ||
					spans[k-1].end+1 == s.start && spans[k-1].Write == s.Write) {
					t.Fatalf("run %d op %d: spans not sorted, disjoint and merged: %+v", run, op, spans)
				}
				kind := int8(1)
				if s.Write {
					kind = 2
				}
				last := s.end
				if last > size {
					if last != math.MaxUint64 {
						t.Fatalf("run %d op %d: span end %d", run, op, last)
					}
					last = size
				}
				for b := s.start; b <= last; b++ {
					got[b] = kind
				}
			}
			if got != model {
				t.Fatalf("run %d op %d: spans %+v give %v, want %v", run, op, spans, got, model)
			}
		}
	}
}

func TestSpanOf(t *testing.T) {
	for _, c := range []struct{ off, n, end uint64 }{
		{0, 0, math.MaxUint64}, {5, 1, 5}, {math.MaxUint64, 1, math.MaxUint64}, {10, math.MaxUint64, math.MaxUint64},
		{1, math.MaxUint64, math.MaxUint64},
	} {
		s := spanOf(c.off, c.n, false)
		if s.start != c.off || s.end != c.end {
			t.Errorf("spanOf(%d, %d) = %+v, want end %d", c.off, c.n, s, c.end)
		}
		if off, n := s.OffLen(); off != c.off || (c.end == math.MaxUint64) != (n == 0) {
			t.Errorf("spanOf(%d, %d).offLen() = %d, %d", c.off, c.n, off, n)
		}
	}
}
