package vfs

import "sort"

// extent is a run of bytes at an offset.
type extent struct {
	off  uint64
	data []byte
}

func (e extent) end() uint64 { return e.off + uint64(len(e.data)) }

// extents is a sorted set of non-overlapping, non-adjacent runs: the bytes a
// file has that the server may not.
type extents []extent

// write stores p at off over whatever was there.
func (x *extents) write(off uint64, p []byte) {
	if len(p) == 0 {
		return
	}
	end := off + uint64(len(p))
	e := *x
	if n := len(e); n == 0 || off > e[n-1].end() {
		*x = append(e, extent{off, append([]byte(nil), p...)})
		return
	} else if off == e[n-1].end() {
		e[n-1].data = append(e[n-1].data, p...)
		return
	}
	// [i, j): the extents that overlap or touch [off, end].
	i := sort.Search(len(e), func(k int) bool { return e[k].end() >= off })
	j := sort.Search(len(e), func(k int) bool { return e[k].off > end })
	if i == j {
		e = append(e, extent{})
		copy(e[i+1:], e[i:])
		e[i] = extent{off, append([]byte(nil), p...)}
		*x = e
		return
	}
	start, stop := min(off, e[i].off), max(end, e[j-1].end())
	buf := make([]byte, stop-start)
	for k := i; k < j; k++ {
		copy(buf[e[k].off-start:], e[k].data)
	}
	copy(buf[off-start:], p)
	e[i] = extent{start, buf}
	*x = append(e[:i+1], e[j:]...)
}

// truncate drops everything at or beyond size.
func (x *extents) truncate(size uint64) {
	e := *x
	k := len(e)
	for k > 0 && e[k-1].off >= size {
		k--
	}
	e = e[:k]
	if k > 0 && e[k-1].end() > size {
		e[k-1].data = e[k-1].data[:size-e[k-1].off]
	}
	*x = e
}

// overlay copies the bytes x has in [off, off+len(buf)) into buf.
func (x extents) overlay(off uint64, buf []byte) {
	end := off + uint64(len(buf))
	i := sort.Search(len(x), func(k int) bool { return x[k].end() > off })
	for ; i < len(x) && x[i].off < end; i++ {
		s, t := max(off, x[i].off), min(end, x[i].end())
		copy(buf[s-off:t-off], x[i].data[s-x[i].off:t-x[i].off])
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
		n += len(e.data)
	}
	return n
}
