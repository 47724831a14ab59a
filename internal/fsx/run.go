package fsx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Report is what a run did, also when it failed or was stopped (then up to the
// operation that failed or the last one done).
type Report struct {
	Seed           uint64
	Ops            int // operations done (the failed one included)
	Counts         map[Kind]int
	Skipped        int // reads and punches drawn while the file was empty
	BytesRead      int64
	BytesWritten   int64
	ExternalChecks int
	FinalSize      int64
	Elapsed        time.Duration
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d ops in %v (", r.Seed, r.Ops, r.Elapsed.Round(time.Millisecond))
	for k := OpRead; k <= OpCheck; k++ {
		if r.Counts[k] > 0 {
			fmt.Fprintf(&b, "%s %d, ", k, r.Counts[k])
		}
	}
	fmt.Fprintf(&b, "skipped %d), read %d B, wrote %d B, %d external checks, final size %d",
		r.Skipped, r.BytesRead, r.BytesWritten, r.ExternalChecks, r.FinalSize)
	return b.String()
}

// Run creates (or truncates) cfg.Path, runs the sequence of cfg.Seed against it
// and the model, and returns at the first mismatch or error (an *Error), when ctx
// ends (an error wrapping ctx.Err()), or after cfg.Ops operations. The file is
// left in place for the caller to inspect or remove.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	c, err := cfg.normalize()
	rep = Report{Seed: cfg.Seed, Counts: map[Kind]int{}}
	if err != nil {
		return rep, err
	}
	start := time.Now()
	defer func() { rep.Elapsed = time.Since(start) }()
	f, err := c.Open(c.Path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return rep, fmt.Errorf("fsx: create %s: %w", c.Path, err)
	}
	r := &runner{c: c, ctx: ctx, f: f, m: newModel(c.MaxLen), rep: &rep,
		buf: make([]byte, c.MaxLen), page: int64(os.Getpagesize()), log: make([]Op, 0, c.LogLen)}
	defer func() {
		if r.af != nil {
			r.af.Close()
		}
		if r.f != nil {
			r.f.Close()
		}
	}()
	g := newGen(c)
	for n := 1; n <= c.Ops+1; n++ {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("fsx: seed %d: stopped by the context after %d of %d operations, no mismatch so far: %w",
				c.Seed, n-1, c.Ops, err)
		}
		op := g.next(n)
		if c.Trace != nil {
			c.Trace(op)
		}
		r.record(op)
		rep.Ops, rep.Counts[op.Kind] = min(n, c.Ops), rep.Counts[op.Kind]+1
		if op.Skip {
			rep.Skipped++
		}
		if err := r.do(op); err != nil {
			return rep, r.fail(op, err)
		}
	}
	rep.FinalSize = r.m.size()
	if err := r.closeAppend(); err != nil {
		return rep, fmt.Errorf("fsx: seed %d: at the end: %w", c.Seed, err)
	}
	f, r.f = r.f, nil
	if err := f.Close(); err != nil {
		return rep, fmt.Errorf("fsx: seed %d: close at the end: %w", c.Seed, err)
	}
	return rep, nil
}

type runner struct {
	c    Config
	ctx  context.Context
	f    File
	af   *os.File // the O_APPEND descriptor (OpAppend), open from the first append until f is closed
	m    *model
	rep  *Report
	buf  []byte
	page int64
	log  []Op // the last c.LogLen operations, a ring
	next int  // where the ring's next entry goes once it is full
}

func (r *runner) record(op Op) {
	if len(r.log) < cap(r.log) {
		r.log = append(r.log, op)
		return
	}
	r.log[r.next] = op
	r.next = (r.next + 1) % len(r.log)
}

func (r *runner) fail(op Op, err error) error {
	var m *Mismatch
	if errors.As(err, &m) && m.Origin == 0 && m.What != "size" && m.First < r.m.size() {
		m.Origin = int(r.m.who[m.First])
	}
	log := append(append([]Op(nil), r.log[r.next:]...), r.log[:r.next]...)
	return &Error{Seed: r.c.Seed, Op: op, Ops: r.c.Ops, Log: log, Replay: r.c.replayFlags(min(op.N, r.c.Ops)), Err: err}
}

// do runs one operation against the file and the model.
func (r *runner) do(op Op) error {
	if op.Skip {
		return nil
	}
	n := op.N
	switch op.Kind {
	case OpRead:
		p := r.buf[:op.Len]
		got, err := r.f.ReadAt(p, op.Off)
		if err != nil && !(errors.Is(err, io.EOF) && got < len(p)) {
			return fmt.Errorf("pread: %w", err)
		}
		r.rep.BytesRead += int64(got)
		return r.compare("read", p[:got], op.Off, op.Len)
	case OpMapRead:
		p := r.buf[:op.Len]
		if err := r.mapped(op.Off, op.Len, unix.PROT_READ, func(mem []byte, at int) error {
			copy(p, mem[at:])
			return nil
		}); err != nil {
			return err
		}
		r.rep.BytesRead += op.Len
		return r.compare("mapread", p, op.Off, op.Len)
	case OpWrite:
		p := r.buf[:op.Len]
		pattern(p, op.Off, n)
		if _, err := r.f.WriteAt(p, op.Off); err != nil {
			return fmt.Errorf("pwrite: %w", err)
		}
		r.m.write(p, op.Off, n)
		r.rep.BytesWritten += op.Len
		return r.checkSize()
	case OpMapWrite:
		if end := op.Off + op.Len; end > r.m.size() {
			if err := r.f.Truncate(end); err != nil {
				return fmt.Errorf("ftruncate to %#x before a mapped write: %w", end, err)
			}
			r.m.resize(end, n)
		}
		p := r.buf[:op.Len]
		pattern(p, op.Off, n)
		if err := r.mapped(op.Off, op.Len, unix.PROT_READ|unix.PROT_WRITE, func(mem []byte, at int) error {
			copy(mem[at:], p)
			if op.Flag {
				if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
					return fmt.Errorf("msync: %w", err)
				}
			}
			return nil
		}); err != nil {
			return err
		}
		r.m.write(p, op.Off, n)
		r.rep.BytesWritten += op.Len
		return r.checkSize()
	case OpAppend:
		return r.append(op)
	case OpTruncate:
		if err := r.f.Truncate(op.Off); err != nil {
			return fmt.Errorf("ftruncate: %w", err)
		}
		r.m.resize(op.Off, n)
		return r.checkSize()
	case OpFsync:
		if err := r.f.Sync(); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
	case OpReopen:
		return r.reopen()
	case OpPunch:
		if err := unix.Fallocate(int(r.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, op.Off, op.Len); err != nil {
			return fmt.Errorf("fallocate PUNCH_HOLE (disable Config.Punch if the file system lacks it): %w", err)
		}
		r.m.zero(op.Off, op.Len, true, n)
		return r.checkSize()
	case OpZero:
		mode := uint32(unix.FALLOC_FL_ZERO_RANGE)
		if op.Flag {
			mode |= unix.FALLOC_FL_KEEP_SIZE
		}
		if err := unix.Fallocate(int(r.f.Fd()), mode, op.Off, op.Len); err != nil {
			return fmt.Errorf("fallocate ZERO_RANGE (disable Config.Punch if the file system lacks it): %w", err)
		}
		r.m.zero(op.Off, op.Len, op.Flag, n)
		return r.checkSize()
	case OpCheck:
		return r.check(op)
	default:
		return fmt.Errorf("unknown operation %v", op.Kind)
	}
	return nil
}

// compare checks got, read from [off, off+length), against the model.
func (r *runner) compare(what string, got []byte, off, length int64) error {
	if m := Compare(what, r.m.data[off:off+length], got, off); m != nil {
		return m
	}
	return nil
}

func (r *runner) checkSize() error {
	fi, err := r.f.Stat()
	if err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if fi.Size() != r.m.size() {
		return &Mismatch{What: "size", Expected: r.m.size(), Actual: fi.Size()}
	}
	return nil
}

// append writes through the O_APPEND descriptor, opened at the first append
// after f was (re)opened: the data must land at the model's end of file,
// wherever the descriptor's own offset is (f's truncations move the end).
func (r *runner) append(op Op) error {
	if r.af == nil {
		af, err := os.OpenFile(r.c.Path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("open O_APPEND: %w", err)
		}
		r.af = af
	}
	p := r.buf[:op.Len]
	pattern(p, op.Off, op.N)
	if k, err := r.af.Write(p); err != nil || k != len(p) {
		return fmt.Errorf("append of %#x bytes: wrote %#x: %w", len(p), k, err)
	}
	r.m.write(p, op.Off, op.N)
	r.rep.BytesWritten += op.Len
	return r.checkSize()
}

// closeAppend closes the O_APPEND descriptor, if open.
func (r *runner) closeAppend() error {
	af := r.af
	if af == nil {
		return nil
	}
	r.af = nil
	if err := af.Close(); err != nil {
		return fmt.Errorf("close of the O_APPEND descriptor: %w", err)
	}
	return nil
}

func (r *runner) reopen() error {
	if err := r.closeAppend(); err != nil {
		return err
	}
	f := r.f
	r.f = nil
	if err := f.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	f, err := r.c.Open(r.c.Path, os.O_RDWR)
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	r.f = f
	return r.checkSize()
}

// check prepares the file, compares all of it with the model, then runs the
// external check.
func (r *runner) check(op Op) error {
	if p := r.c.CheckPrep; p == PrepFsync || p == PrepFsyncClose {
		if err := r.f.Sync(); err != nil {
			return fmt.Errorf("fsync before the check: %w", err)
		}
	}
	if p := r.c.CheckPrep; p == PrepClose || p == PrepFsyncClose {
		if err := r.closeAppend(); err != nil {
			return err
		}
		f := r.f
		r.f = nil
		if err := f.Close(); err != nil {
			return fmt.Errorf("close before the check: %w", err)
		}
	}
	if r.c.ExternalCheck != nil {
		r.rep.ExternalChecks++
		if err := r.c.ExternalCheck(r.ctx, Snapshot{N: op.N, Data: r.m.data}); err != nil {
			var m *Mismatch
			if errors.As(err, &m) {
				return err
			}
			return fmt.Errorf("external check: %w", err)
		}
	}
	if r.f == nil {
		f, err := r.c.Open(r.c.Path, os.O_RDWR)
		if err != nil {
			return fmt.Errorf("reopen after the check: %w", err)
		}
		r.f = f
	}
	if err := r.checkSize(); err != nil {
		return err
	}
	size := r.m.size()
	got, err := r.f.ReadAt(r.buf[:size], 0)
	if err != nil && !(errors.Is(err, io.EOF) && int64(got) < size) {
		return fmt.Errorf("pread of the whole file: %w", err)
	}
	r.rep.BytesRead += int64(got)
	return r.compare("check", r.buf[:got], 0, size)
}

// mapped maps [off, off+length) of the file shared with prot and calls fn with
// the mapping and the index of off in it. A fault in the mapping (SIGBUS: the
// file is shorter than it said) becomes an error instead of killing the test.
func (r *runner) mapped(off, length int64, prot int, fn func(mem []byte, at int) error) (err error) {
	pg := off &^ (r.page - 1)
	mem, err := unix.Mmap(int(r.f.Fd()), pg, int(off+length-pg), prot, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %#x..%#x: %w", pg, off+length, err)
	}
	defer func() {
		if e := unix.Munmap(mem); e != nil && err == nil {
			err = fmt.Errorf("munmap: %w", e)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("fault in the mapping of %#x..%#x: %v", pg, off+length, p)
		}
	}()
	return fn(mem, int(off-pg))
}
