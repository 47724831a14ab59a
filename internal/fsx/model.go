package fsx

// model is the file's expected contents, and for each byte the operation that
// last set it (0: none since the start; holes and extensions are set by the
// operation that made them).
type model struct {
	data []byte
	who  []int32
}

func newModel(maxLen int64) *model {
	return &model{data: make([]byte, 0, maxLen), who: make([]int32, 0, maxLen)}
}

func (m *model) size() int64 { return int64(len(m.data)) }

// resize sets the size; new bytes are zeros set by op n.
func (m *model) resize(size int64, n int) {
	old := m.size()
	m.data, m.who = m.data[:size], m.who[:size]
	if size > old {
		clear(m.data[old:])
		fill(m.who[old:], int32(n))
	}
}

// fill sets every element of p to v, by doubling copies (memmove, which the race
// detector checks as one range instead of element by element).
func fill[T any](p []T, v T) {
	if len(p) == 0 {
		return
	}
	p[0] = v
	for i := 1; i < len(p); i *= 2 {
		copy(p[i:], p[:i])
	}
}

// patternPeriod is the period of pattern in the offset.
const patternPeriod = 512

// pattern fills p with what op n writes at offset off: never zero at even
// offsets (so holes show), the operation's number in every byte, and different at
// every odd offset of a 512-byte period. It is built once per call and copied,
// which keeps 100,000 operations fast under the race detector.
func pattern(p []byte, off int64, n int) {
	var block [2 * patternPeriod]byte
	for j := range block {
		if j%2 == 0 {
			block[j] = byte(n%255) + 1
		} else {
			block[j] = byte(n>>8) ^ byte(j>>1)
		}
	}
	start := int(off % patternPeriod)
	for i := 0; i < len(p); i += patternPeriod {
		copy(p[i:], block[start:start+patternPeriod])
	}
}

// write records op n writing p at off.
func (m *model) write(p []byte, off int64, n int) {
	end := off + int64(len(p))
	if end > m.size() {
		m.resize(end, n)
	}
	copy(m.data[off:end], p)
	fill(m.who[off:end], int32(n))
}

// zero records op n zeroing [off, off+length), within the current size when
// keepSize, extending the file otherwise.
func (m *model) zero(off, length int64, keepSize bool, n int) {
	end := off + length
	if !keepSize && end > m.size() {
		m.resize(end, n)
	}
	end = min(end, m.size())
	if off >= end {
		return
	}
	clear(m.data[off:end])
	fill(m.who[off:end], int32(n))
}
