package lockmgr

// span is one lock record of an owner on a file: a maximal range of one type.
// An owner's spans are sorted, disjoint, and two adjacent spans differ in type.
type span struct {
	r Range
	t LockType
}

// setRange returns spans with r set to t (Unlocked removes it): POSIX
// semantics for one owner. The result is a new slice, merged.
func setRange(spans []span, r Range, t LockType) []span {
	out := make([]span, 0, len(spans)+2)
	for _, s := range spans {
		if !s.r.overlaps(r) {
			out = append(out, s)
			continue
		}
		if s.r.Start < r.Start {
			out = append(out, span{Range{s.r.Start, r.Start - 1}, s.t})
		}
		if s.r.End > r.End {
			out = append(out, span{Range{r.End + 1, s.r.End}, s.t})
		}
	}
	if t != Unlocked {
		out = append(out, span{r, t})
	}
	sortSpans(out)
	return merge(out)
}

func sortSpans(s []span) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].r.Start < s[j-1].r.Start; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// merge joins adjacent spans of the same type.
func merge(s []span) []span {
	out := s[:0]
	for _, x := range s {
		if n := len(out); n > 0 && out[n-1].t == x.t && out[n-1].r.adjacent(x.r) {
			out[n-1].r.End = x.r.End
			continue
		}
		out = append(out, x)
	}
	return out
}

// clip returns the parts of spans inside r.
func clip(spans []span, r Range) []span {
	var out []span
	for _, s := range spans {
		if !s.r.overlaps(r) {
			continue
		}
		out = append(out, span{Range{max(s.r.Start, r.Start), min(s.r.End, r.End)}, s.t})
	}
	return out
}

// raises reports whether setting r to t gives some byte of r a stronger type
// than spans hold there (the backing file must then acquire, and may refuse).
func raises(spans []span, r Range, t LockType) bool {
	if t == Unlocked {
		return false
	}
	next := r.Start
	for _, s := range spans {
		if s.r.End < r.Start || s.r.Start > r.End {
			continue
		}
		if s.r.Start > next || s.t < t {
			return true
		}
		if s.r.End >= r.End {
			return false
		}
		next = s.r.End + 1
	}
	return true
}

// subtract returns the parts of rs outside r.
func subtract(rs []Range, r Range) []Range {
	var out []Range
	for _, x := range rs {
		if !x.overlaps(r) {
			out = append(out, x)
			continue
		}
		if x.Start < r.Start {
			out = append(out, Range{x.Start, r.Start - 1})
		}
		if x.End > r.End {
			out = append(out, Range{r.End + 1, x.End})
		}
	}
	return out
}

// spansEqual compares two span lists.
func spansEqual(a, b []span) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
