package cachedir

import (
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
)

var modelSeed = flag.Uint64("cachedir.seed", 0, "run TestModel with this seed only")

// model is the in-memory truth the randomized test compares a File against:
// one flag per byte for valid and dirty.
type model struct {
	data, valid, dirty []byte // per byte; valid and dirty are 0 or 1
	size               int64
	version, gen       uint64
	truncated          bool
	truncTo            int64
}

const modelSpan = 8192

func newModel() *model {
	return &model{data: make([]byte, modelSpan), valid: make([]byte, modelSpan), dirty: make([]byte, modelSpan)}
}

func (m *model) ranges(flags []byte) []Range {
	var s rangeSet
	for i := int64(0); i < m.size; i++ {
		if flags[i] == 1 {
			s = s.add(Range{i, 1})
		}
	}
	return s.clone()
}

func (m *model) resize(size int64, zeros bool) {
	if size < m.size {
		m.gen++ // fills from before a shrink are refused
	}
	for i := size; i < modelSpan; i++ {
		m.data[i], m.valid[i], m.dirty[i] = 0, 0, 0
	}
	if zeros {
		for i := m.size; i < size; i++ {
			m.valid[i] = 1
		}
	}
	m.size = size
}

func (m *model) invalidate() {
	m.gen++
	copy(m.valid, m.dirty)
	for i := range m.data {
		if m.valid[i] == 0 {
			m.data[i] = 0
		}
	}
}

// TestModel applies random operations to a File and to the model and
// compares every range and every cached byte after each one. A failure names
// its seed; rerun it with -cachedir.seed=N.
func TestModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if *modelSeed != 0 {
		seeds = []uint64{*modelSeed}
	}
	for _, seed := range seeds {
		runModel(t, seed, 1000)
	}
}

func runModel(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := testDir(t)
	c := openCache(t, dir, 0)
	defer func() { c.Close() }()
	f := mustFile(t, c, "model")
	m := newModel()
	var wb *WriteBack
	var wbWritten rangeSet
	var wbTrunc bool
	var wbTruncTo int64
	var last []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d after %v: "+format, append([]any{seed, last}, args...)...)
	}
	randRange := func(maxLen int) (int64, int) {
		return rng.Int64N(modelSpan - int64(maxLen)), 1 + rng.IntN(maxLen)
	}
	for op := range ops {
		var name string
		switch k := rng.IntN(20); {
		case k < 7:
			off, n := randRange(700)
			p := pattern(byte(rng.Uint32()), n)
			name = "write"
			if _, err := f.WriteAt(p, off); err != nil {
				fail("WriteAt: %v", err)
			}
			if off > m.size {
				m.resize(off, true)
			}
			copy(m.data[off:], p)
			for i := off; i < off+int64(n); i++ {
				m.valid[i], m.dirty[i] = 1, 1
			}
			m.size = max(m.size, off+int64(n))
			wbWritten = wbWritten.add(Range{off, int64(n)})
		case k < 11:
			off, n := randRange(1500)
			p := pattern(byte(rng.Uint32()), n)
			gen := f.Gen()
			stale := rng.IntN(6) == 0
			if stale {
				gen--
			}
			name = "fill"
			err := f.Fill(gen, off, p)
			if stale {
				if !errors.Is(err, ErrStaleFill) {
					fail("stale Fill: %v", err)
				}
				break
			}
			if err != nil {
				fail("Fill: %v", err)
			}
			for i := off; i < min(off+int64(n), m.size); i++ {
				if m.valid[i] == 0 {
					m.data[i], m.valid[i] = p[i-off], 1
				}
			}
		case k < 13:
			size := rng.Int64N(modelSpan)
			name = "truncate"
			if err := f.Truncate(size); err != nil {
				fail("Truncate: %v", err)
			}
			if size != m.size {
				m.resize(size, true)
				if !m.truncated || size < m.truncTo {
					m.truncTo = size
				}
				m.truncated = true
				if !wbTrunc || size < wbTruncTo {
					wbTruncTo = size
				}
				wbTrunc = true
			}
		case k < 14:
			name = "invalidate"
			if err := f.Invalidate(); err != nil {
				fail("Invalidate: %v", err)
			}
			m.invalidate()
		case k < 15:
			v, size := m.version+uint64(rng.IntN(2)), rng.Int64N(modelSpan)
			name = "setversion"
			if err := f.SetVersion(v, size); err != nil {
				fail("SetVersion: %v", err)
			}
			if v != m.version {
				m.invalidate()
				m.version = v
			}
			if !m.truncated && !slices.Contains(m.dirty, 1) && size != m.size {
				m.resize(size, false)
			}
		case k < 16:
			name = "dirty"
			w := f.Dirty()
			wb, wbWritten, wbTrunc = &w, nil, false
		case k < 17:
			if wb == nil {
				continue
			}
			name = "markclean"
			m.version++
			if err := f.MarkClean(*wb, m.version); err != nil {
				fail("MarkClean: %v", err)
			}
			for _, r := range rangeSet(wb.Ranges).subtract(wbWritten) {
				for i := r.Off; i < r.End(); i++ {
					m.dirty[i] = 0
				}
			}
			if wb.Truncated {
				if wbTrunc {
					m.truncTo = wbTruncTo
				} else {
					m.truncated, m.truncTo = false, 0
				}
			}
			wb = nil
		case k < 19:
			name = "sync"
			if err := f.Sync(); err != nil {
				fail("Sync: %v", err)
			}
		default:
			name = "reopen"
			if err := c.Close(); err != nil {
				fail("Close: %v", err)
			}
			c = openCache(t, dir, 0)
			f = mustFile(t, c, "model")
			wb = nil
		}
		last = append(last, name)
		if len(last) > 8 {
			last = last[1:]
		}
		check(t, f, m, func(format string, args ...any) { fail("op %d: "+format, append([]any{op}, args...)...) })
	}
}

func check(t *testing.T, f *File, m *model, fail func(string, ...any)) {
	t.Helper()
	info := f.Info()
	if info.Size != m.size || info.Version != m.version || info.Gen != m.gen || info.Truncated != m.truncated || info.TruncTo != m.truncTo {
		fail("info %+v, model size %d version %d gen %d truncated %v/%d", info, m.size, m.version, m.gen, m.truncated, m.truncTo)
	}
	if want := m.ranges(m.valid); !slices.Equal(info.Valid, want) {
		fail("valid %v, want %v", info.Valid, want)
	}
	if want := m.ranges(m.dirty); !slices.Equal(info.Dirty, want) {
		fail("dirty %v, want %v", info.Dirty, want)
	}
	for _, r := range info.Valid {
		p := make([]byte, r.Len)
		if n, err := f.ReadAt(p, r.Off); err != nil || n != len(p) {
			fail("ReadAt %v: %d, %v", r, n, err)
		}
		if !slices.Equal(p, m.data[r.Off:r.End()]) {
			fail("bytes of %v differ", r)
		}
	}
	_, err := f.ReadAt(make([]byte, m.size), 0)
	missing := rangeSet{{0, m.size}}.subtract(m.ranges(m.valid))
	if m.size == 0 {
		missing = nil
	}
	if me := missingOf(err); len(missing) > 0 && (me == nil || !slices.Equal(me.Ranges, missing.clone()) || me.Gen != m.gen) {
		fail("ReadAt of everything: %v, want missing %v", err, missing)
	}
}
