package cachedir

import (
	"slices"
	"testing"
)

func rs(pairs ...int64) rangeSet {
	var s rangeSet
	for i := 0; i < len(pairs); i += 2 {
		s = append(s, Range{pairs[i], pairs[i+1]})
	}
	return s
}

func TestRangeAdd(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    rangeSet
		r    Range
		want rangeSet
	}{
		{"empty", nil, Range{5, 10}, rs(5, 10)},
		{"zero length", rs(0, 4), Range{10, 0}, rs(0, 4)},
		{"before", rs(10, 5), Range{0, 5}, rs(0, 5, 10, 5)},
		{"after", rs(0, 5), Range{10, 5}, rs(0, 5, 10, 5)},
		{"touching left merges", rs(10, 5), Range{5, 5}, rs(5, 10)},
		{"touching right merges", rs(0, 5), Range{5, 5}, rs(0, 10)},
		{"overlap", rs(0, 10), Range{5, 10}, rs(0, 15)},
		{"inside", rs(0, 10), Range{2, 3}, rs(0, 10)},
		{"covers several", rs(0, 2, 4, 2, 8, 2, 20, 1), Range{1, 8}, rs(0, 10, 20, 1)},
		{"bridges gap", rs(0, 5, 10, 5), Range{5, 5}, rs(0, 15)},
		{"between", rs(0, 2, 10, 2), Range{4, 2}, rs(0, 2, 4, 2, 10, 2)},
	} {
		got := tc.s.add(tc.r)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v add %v = %v, want %v", tc.name, tc.s, tc.r, got, tc.want)
		}
		if !got.normal(1 << 40) {
			t.Errorf("%s: result %v not normal", tc.name, got)
		}
	}
}

func TestRangeRemove(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    rangeSet
		r    Range
		want rangeSet
	}{
		{"empty", nil, Range{0, 5}, rs()},
		{"disjoint", rs(0, 5), Range{5, 5}, rs(0, 5)},
		{"split", rs(0, 10), Range{3, 4}, rs(0, 3, 7, 3)},
		{"head", rs(0, 10), Range{0, 4}, rs(4, 6)},
		{"tail", rs(0, 10), Range{6, 10}, rs(0, 6)},
		{"whole", rs(2, 3), Range{0, 10}, rs()},
		{"across several", rs(0, 4, 6, 4, 12, 4), Range{2, 12}, rs(0, 2, 14, 2)},
	} {
		got := tc.s.remove(tc.r)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v remove %v = %v, want %v", tc.name, tc.s, tc.r, got, tc.want)
		}
	}
}

func TestRangeQueries(t *testing.T) {
	s := rs(0, 4, 10, 5, 20, 2)
	if got, want := s.missing(Range{2, 20}), rs(4, 6, 15, 5); !slices.Equal(got, want) {
		t.Errorf("missing = %v, want %v", got, want)
	}
	if got, want := s.within(Range{2, 20}), rs(2, 2, 10, 5, 20, 2); !slices.Equal(got, want) {
		t.Errorf("within = %v, want %v", got, want)
	}
	if got := s.missing(Range{10, 5}); len(got) != 0 {
		t.Errorf("missing inside = %v", got)
	}
	if got, want := s.clip(12), rs(0, 4, 10, 2); !slices.Equal(got, want) {
		t.Errorf("clip = %v, want %v", got, want)
	}
	if got, want := s.intersect(rs(3, 8, 21, 5)), rs(3, 1, 10, 1, 21, 1); !slices.Equal(got, want) {
		t.Errorf("intersect = %v, want %v", got, want)
	}
	if s.total() != 11 || s.end() != 22 {
		t.Errorf("total %d end %d", s.total(), s.end())
	}
	for _, tc := range []struct {
		a, b rangeSet
		want bool
	}{
		{rs(), rs(), true},
		{rs(1, 2), rs(0, 4), true},
		{rs(1, 2, 10, 1), rs(0, 4, 9, 3), true},
		{rs(1, 4), rs(0, 4), false},
		{rs(5, 1), rs(0, 4, 6, 1), false},
		{rs(1, 1), rs(), false},
	} {
		if got := tc.a.subsetOf(tc.b); got != tc.want {
			t.Errorf("%v subsetOf %v = %v", tc.a, tc.b, got)
		}
	}
	for _, bad := range []rangeSet{rs(0, 0), rs(-1, 2), rs(0, 2, 2, 2), rs(4, 2, 0, 1), rs(0, 11)} {
		if bad.normal(10) {
			t.Errorf("%v accepted as normal below 10", bad)
		}
	}
}
