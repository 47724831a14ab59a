package fsx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// File is what Run needs of an open file. *os.File implements it; tests wrap it
// to inject faults. Fd is used for mmap and fallocate.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Stat() (os.FileInfo, error)
	Fd() uintptr
	Close() error
}

// Prep is what Run does to the file before calling Config.ExternalCheck.
type Prep int

const (
	// PrepFsync fsyncs the file first, so that its data has reached the server (or
	// the disk) when the hook reads it another way. The zero value.
	PrepFsync Prep = iota
	// PrepNone calls the hook with the file as it is.
	PrepNone
	// PrepClose closes the file before the hook and reopens it after: what
	// close-to-open consistency needs before a second client opens the file.
	PrepClose
	// PrepFsyncClose fsyncs, then closes (and reopens after): both of the above,
	// for a mount that does not write back on close (snfs mode's delayed
	// write-back) checked through the export directory and a second client.
	PrepFsyncClose
)

// Snapshot is the model at an external check. Data is the file's expected
// contents; it is valid only during the call and must not be modified.
type Snapshot struct {
	N    int    // operations done so far
	Data []byte // expected contents; len(Data) is the expected size
}

// Config describes one run. Zero values take the defaults noted.
type Config struct {
	Path string // the file to create (truncated if it exists) on the file system under test
	Ops  int    // operations to run (default 10000)
	Seed uint64

	MaxLen   int64 // bound on the file's size (default 256 KiB)
	MaxOpLen int64 // bound on one read or write (default MaxLen/4, at most MaxLen)

	// Weights are the relative frequencies of the random operations; the zero
	// value means DefaultWeights. The flags below zero the weights of what they
	// leave disabled.
	Weights Weights
	Mmap    bool // mapped reads and writes
	Fsync   bool // fsync operations
	Punch   bool // fallocate PUNCH_HOLE and ZERO_RANGE (not every file system has them)

	// ReopenEvery makes every ReopenEvery-th operation a close and reopen of the
	// file (0: only as Weights.Reopen draws it).
	ReopenEvery int

	// CheckEvery makes every CheckEvery-th operation a check (0: none but the
	// final one, operation Ops+1, which every run ends with): CheckPrep is applied to the file, the whole
	// file is read through it and compared with the model, then ExternalCheck,
	// when set, is called. A *Mismatch it returns (see Compare, CompareFile) is
	// reported like one found by a read.
	CheckEvery    int
	CheckPrep     Prep
	ExternalCheck func(ctx context.Context, s Snapshot) error

	// Open opens Path with the given os.OpenFile flags (default: os.OpenFile with
	// mode 0644). Tests use it to wrap the file.
	Open func(path string, flag int) (File, error)
	// Trace, when set, is called with each operation before it runs (replays log
	// every operation with it).
	Trace func(op Op)
	// LogLen is how many of the last operations an *Error lists (default 20).
	LogLen int
}

// Weights are relative frequencies of the random operation kinds.
type Weights struct {
	Read, Write, MapRead, MapWrite, Truncate, Fsync, Reopen, Punch, Zero int
	// Append: writes through a second descriptor opened O_APPEND (not in
	// DefaultWeights: the sequences of the defaults stay as they were).
	Append int
}

// DefaultWeights is what a zero Config.Weights means: reads and writes most,
// every enabled kind often enough to meet all the others within a few hundred
// operations. Random reopens are off (use ReopenEvery or set Reopen).
var DefaultWeights = Weights{Read: 25, Write: 25, MapRead: 10, MapWrite: 10, Truncate: 10, Fsync: 3, Punch: 5, Zero: 5}

func (w *Weights) fields() []struct {
	name string
	kind Kind
	p    *int
} {
	return []struct {
		name string
		kind Kind
		p    *int
	}{
		{"read", OpRead, &w.Read}, {"write", OpWrite, &w.Write},
		{"mapread", OpMapRead, &w.MapRead}, {"mapwrite", OpMapWrite, &w.MapWrite},
		{"truncate", OpTruncate, &w.Truncate}, {"fsync", OpFsync, &w.Fsync},
		{"reopen", OpReopen, &w.Reopen}, {"punch", OpPunch, &w.Punch}, {"zero", OpZero, &w.Zero},
		{"append", OpAppend, &w.Append},
	}
}

// String gives the weights as ParseWeights reads them, e.g. "read=25,write=25".
func (w Weights) String() string {
	var parts []string
	for _, f := range w.fields() {
		if *f.p != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", f.name, *f.p))
		}
	}
	return strings.Join(parts, ",")
}

// ParseWeights reads "name=N,..." (names as in Weights, lower case); names left
// out weigh 0. The empty string is the zero Weights (the defaults).
func ParseWeights(s string) (Weights, error) {
	var w Weights
	if s == "" {
		return w, nil
	}
	for _, kv := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(val)
		if !ok || err != nil || n < 0 {
			return w, fmt.Errorf("fsx: weight %q: want name=N with N >= 0", kv)
		}
		found := false
		for _, f := range w.fields() {
			if f.name == name {
				*f.p, found = n, true
			}
		}
		if !found {
			return w, fmt.Errorf("fsx: weight %q: unknown operation %q", kv, name)
		}
	}
	return w, nil
}

// normalize fills the defaults and checks the bounds.
func (c Config) normalize() (Config, error) {
	if c.Ops == 0 {
		c.Ops = 10000
	}
	if c.MaxLen == 0 {
		c.MaxLen = 256 << 10
	}
	if c.MaxOpLen == 0 {
		c.MaxOpLen = max(c.MaxLen/4, 1)
	}
	c.MaxOpLen = min(c.MaxOpLen, c.MaxLen)
	if c.Weights == (Weights{}) {
		c.Weights = DefaultWeights
	}
	c.Weights = c.mask(c.Weights)
	if c.LogLen == 0 {
		c.LogLen = 20
	}
	switch {
	case c.Ops < 0 || c.MaxLen < 0 || c.MaxOpLen < 0 || c.ReopenEvery < 0 || c.CheckEvery < 0:
		return c, errors.New("fsx: negative Ops, MaxLen, MaxOpLen, ReopenEvery or CheckEvery")
	case c.MaxLen > 1<<30:
		return c, fmt.Errorf("fsx: MaxLen %d: the model is held in memory, keep it under 1 GiB", c.MaxLen)
	}
	total := 0
	for _, f := range c.Weights.fields() {
		if *f.p < 0 {
			return c, fmt.Errorf("fsx: negative weight for %s", f.name)
		}
		total += *f.p
	}
	if total == 0 {
		return c, fmt.Errorf("fsx: no operation enabled (weights %q, Mmap %v, Fsync %v, Punch %v)",
			c.Weights, c.Mmap, c.Fsync, c.Punch)
	}
	if c.Open == nil {
		c.Open = func(path string, flag int) (File, error) { return os.OpenFile(path, flag, 0o644) }
	}
	return c, nil
}

// mask zeroes the weights of the kinds the flags leave disabled.
func (c Config) mask(w Weights) Weights {
	if !c.Mmap {
		w.MapRead, w.MapWrite = 0, 0
	}
	if !c.Fsync {
		w.Fsync = 0
	}
	if !c.Punch {
		w.Punch, w.Zero = 0, 0
	}
	return w
}

// String names a Prep as the -fsx.checkprep flag takes it.
func (p Prep) String() string {
	switch p {
	case PrepFsync:
		return "fsync"
	case PrepNone:
		return "none"
	case PrepClose:
		return "close"
	case PrepFsyncClose:
		return "fsync+close"
	}
	return fmt.Sprintf("Prep(%d)", int(p))
}

// ParsePrep reads "fsync", "none", "close" or "fsync+close".
func ParsePrep(s string) (Prep, error) {
	for _, p := range []Prep{PrepFsync, PrepNone, PrepClose, PrepFsyncClose} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("fsx: check prep %q: want fsync, none, close or fsync+close", s)
}

// replayFlags gives the test flags of TestFsxReplay that rebuild this sequence.
func (c Config) replayFlags(ops int) string {
	s := fmt.Sprintf("-fsx.seed=%d -fsx.ops=%d -fsx.maxlen=%d -fsx.maxoplen=%d", c.Seed, ops, c.MaxLen, c.MaxOpLen)
	if c.Mmap {
		s += " -fsx.mmap"
	}
	if c.Fsync {
		s += " -fsx.fsync"
	}
	if c.Punch {
		s += " -fsx.punch"
	}
	if c.ReopenEvery > 0 {
		s += fmt.Sprintf(" -fsx.reopen=%d", c.ReopenEvery)
	}
	if c.Weights != c.mask(DefaultWeights) {
		s += fmt.Sprintf(" -fsx.weights=%s", c.Weights)
	}
	if c.CheckEvery > 0 {
		s += fmt.Sprintf(" -fsx.checkevery=%d", c.CheckEvery)
	}
	if c.CheckPrep != PrepFsync {
		s += fmt.Sprintf(" -fsx.checkprep=%s", c.CheckPrep)
	}
	return s
}
