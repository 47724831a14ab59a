package cachedir

// Range is a byte range [Off, Off+Len) of a file.
type Range struct {
	Off, Len int64
}

// End is the first offset past r.
func (r Range) End() int64 { return r.Off + r.Len }

// rangeSet is a set of bytes kept as sorted, non-overlapping, non-adjacent
// ranges of positive length: the normal form, so that two equal sets have
// equal slices and the encoding of an entry is canonical.
//
// Operations return a new slice where they change the set; they never modify
// a slice shared with a caller (Info and Dirty hand out copies anyway).
type rangeSet []Range

// add returns s ∪ r.
func (s rangeSet) add(r Range) rangeSet {
	if r.Len <= 0 {
		return s
	}
	out := make(rangeSet, 0, len(s)+1)
	start, end := r.Off, r.End()
	i := 0
	for ; i < len(s) && s[i].End() < start; i++ {
		out = append(out, s[i])
	}
	// Merge everything overlapping or touching [start, end).
	for ; i < len(s) && s[i].Off <= end; i++ {
		start = min(start, s[i].Off)
		end = max(end, s[i].End())
	}
	out = append(out, Range{start, end - start})
	return append(out, s[i:]...)
}

// remove returns s \ r.
func (s rangeSet) remove(r Range) rangeSet {
	if r.Len <= 0 {
		return s
	}
	out := make(rangeSet, 0, len(s)+1)
	for _, x := range s {
		if x.End() <= r.Off || x.Off >= r.End() {
			out = append(out, x)
			continue
		}
		if x.Off < r.Off {
			out = append(out, Range{x.Off, r.Off - x.Off})
		}
		if x.End() > r.End() {
			out = append(out, Range{r.End(), x.End() - r.End()})
		}
	}
	return out
}

// union returns s ∪ t.
func (s rangeSet) union(t rangeSet) rangeSet {
	for _, r := range t {
		s = s.add(r)
	}
	return s
}

// subtract returns s \ t.
func (s rangeSet) subtract(t rangeSet) rangeSet {
	for _, r := range t {
		s = s.remove(r)
	}
	return s
}

// within returns the parts of r that are in s.
func (s rangeSet) within(r Range) rangeSet {
	var out rangeSet
	for _, x := range s {
		lo, hi := max(x.Off, r.Off), min(x.End(), r.End())
		if lo < hi {
			out = append(out, Range{lo, hi - lo})
		}
	}
	return out
}

// missing returns the parts of r that are not in s.
func (s rangeSet) missing(r Range) rangeSet {
	if r.Len <= 0 {
		return nil
	}
	return rangeSet{r}.subtract(s.within(r))
}

// intersect returns s ∩ t.
func (s rangeSet) intersect(t rangeSet) rangeSet {
	var out rangeSet
	for _, r := range t {
		out = append(out, s.within(r)...)
	}
	return out
}

// clip returns the parts of s below size.
func (s rangeSet) clip(size int64) rangeSet {
	return s.remove(Range{size, maxOffset - size})
}

// total is the number of bytes in s.
func (s rangeSet) total() int64 {
	var n int64
	for _, r := range s {
		n += r.Len
	}
	return n
}

// end is the first offset past the last range (0 for an empty set).
func (s rangeSet) end() int64 {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].End()
}

// normal reports whether s is in normal form with every byte below limit.
func (s rangeSet) normal(limit int64) bool {
	var prevEnd int64 = -1
	for _, r := range s {
		if r.Off < 0 || r.Len <= 0 || r.Off > limit || r.Len > limit-r.Off || r.Off <= prevEnd {
			return false
		}
		prevEnd = r.End()
	}
	return true
}

// subsetOf reports whether every byte of s is in t; both in normal form. It
// is linear in len(s)+len(t), as the decoder needs.
func (s rangeSet) subsetOf(t rangeSet) bool {
	j := 0
	for _, r := range s {
		for j < len(t) && t[j].End() <= r.Off {
			j++
		}
		// In normal form a range of s lies in at most one range of t.
		if j == len(t) || t[j].Off > r.Off || t[j].End() < r.End() {
			return false
		}
	}
	return true
}

func (s rangeSet) clone() []Range {
	if len(s) == 0 {
		return nil
	}
	return append([]Range(nil), s...)
}
