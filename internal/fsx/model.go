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
		for i := old; i < size; i++ {
			m.who[i] = int32(n)
		}
	}
}

// pattern fills p with what op n writes at offset off: never zero at even
// offsets (so holes show), and different for every operation and position.
func pattern(p []byte, off int64, n int) {
	for i := range p {
		o := off + int64(i)
		if o%2 == 0 {
			p[i] = byte(n%255) + 1
		} else {
			p[i] = byte(n>>8) ^ byte(o>>1)
		}
	}
}

// write records op n writing p at off.
func (m *model) write(p []byte, off int64, n int) {
	end := off + int64(len(p))
	if end > m.size() {
		m.resize(end, n)
	}
	copy(m.data[off:end], p)
	for i := off; i < end; i++ {
		m.who[i] = int32(n)
	}
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
	for i := off; i < end; i++ {
		m.who[i] = int32(n)
	}
}
