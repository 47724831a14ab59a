package vfs

import "sort"

// extent is a run of bytes at an offset.
type Extent struct {
	Off  uint64
	Data []byte
}

func (e Extent) end() uint64 { return e.Off + uint64(len(e.Data)) }

// extents is a sorted set of non-overlapping, non-adjacent runs: the bytes a
// file has that the server may not.
type extents []Extent

// Write stores p at off over whatever was there.
func (x *extents) Write(off uint64, p []byte) {
	if len(p) == 0 {
		return
	}
	end := off + uint64(len(p))
	e := *x
	if n := len(e); n == 0 || off > e[n-1].end() {
		*x = append(e, Extent{off, append([]byte(nil), p...)})
		return
	} else if off == e[n-1].end() {
		e[n-1].Data = append(e[n-1].Data, p...)
		return
	}
	// [i, j): the extents that overlap or touch [off, end].
	i := sort.Search(len(e), func(k int) bool { return e[k].end() >= off })
	j := sort.Search(len(e), func(k int) bool { return e[k].Off > end })
	if i == j {
		e = append(e, Extent{})
		copy(e[i+1:], e[i:])
		e[i] = Extent{off, append([]byte(nil), p...)}
		*x = e
		return
	}
	start, stop := min(off, e[i].Off), max(end, e[j-1].end())
	buf := make([]byte, stop-start)
	for k := i; k < j; k++ {
		copy(buf[e[k].Off-start:], e[k].Data)
	}
	copy(buf[off-start:], p)
	e[i] = Extent{start, buf}
	*x = append(e[:i+1], e[j:]...)
}

// truncate drops everything at or beyond size.
func (x *extents) truncate(size uint64) {
	e := *x
	k := len(e)
	for k > 0 && e[k-1].Off >= size {
		k--
	}
	e = e[:k]
	if k > 0 && e[k-1].end() > size {
		e[k-1].Data = e[k-1].Data[:size-e[k-1].Off]
	}
	*x = e
}

// overlay copies the bytes x has in [off, off+len(buf)) into buf.
func (x extents) overlay(off uint64, buf []byte) {
	end := off + uint64(len(buf))
	i := sort.Search(len(x), func(k int) bool { return x[k].end() > off })
	for ; i < len(x) && x[i].Off < end; i++ {
		s, t := max(off, x[i].Off), min(end, x[i].end())
		copy(buf[s-off:t-off], x[i].Data[s-x[i].Off:t-x[i].Off])
	}
}

func (x extents) end() uint64 {
	if len(x) == 0 {
		return 0
	}
	return x[len(x)-1].end()
}

func (x extents) bytes() int {
	n := 0
	for _, e := range x {
		n += len(e.Data)
	}
	return n
}
