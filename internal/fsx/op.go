package fsx

import (
	"fmt"
	"math/rand/v2"
)

// Kind is an operation's kind.
type Kind int

// The operation kinds. OpCheck comes from Config.CheckEvery and the end of a
// run, OpReopen from Config.ReopenEvery or Weights.Reopen; the rest are drawn by
// weight.
const (
	OpRead     Kind = iota // pread within the file
	OpWrite                // pwrite anywhere below MaxLen (past the end leaves a hole)
	OpMapRead              // read through a shared mapping, within the file
	OpMapWrite             // write through a shared mapping; extends with ftruncate first
	OpTruncate             // ftruncate to a size below or above the current one
	OpFsync                // fsync
	OpReopen               // close and reopen
	OpPunch                // fallocate PUNCH_HOLE|KEEP_SIZE within the file
	OpZero                 // fallocate ZERO_RANGE, with or without KEEP_SIZE
	OpAppend               // write(2) through a second descriptor opened O_APPEND: at the end of file
	OpCheck                // whole-file comparison, then Config.ExternalCheck
)

var kindNames = [...]string{"read", "write", "mapread", "mapwrite", "truncate", "fsync", "reopen", "punch", "zero", "append", "check"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Op is one operation of a run. Off and Len are the byte range (Truncate: Off
// is the new size). Flag is MapWrite's msync(MS_SYNC) before munmap and Zero's
// KEEP_SIZE. Skip marks a read or punch drawn while the file was empty, or an
// append drawn while the file was MaxLen long, which does nothing. An append's
// Off is the size it must land at. Size is the model's size after the operation.
type Op struct {
	N        int // 1-based position in the sequence
	Kind     Kind
	Off, Len int64
	Flag     bool
	Skip     bool
	Size     int64
}

func (o Op) String() string {
	s := fmt.Sprintf("%6d %-8s", o.N, o.Kind)
	switch {
	case o.Skip:
		s += " skipped (empty file, or an append at MaxLen)"
	case o.Kind == OpTruncate:
		s += fmt.Sprintf(" to %#x", o.Off)
	case o.Len > 0:
		s += fmt.Sprintf(" %#x..%#x (%#x bytes)", o.Off, o.Off+o.Len, o.Len)
	}
	switch {
	case o.Kind == OpMapWrite && o.Flag:
		s += " msync"
	case o.Kind == OpZero && o.Flag:
		s += " keep-size"
	}
	return s + fmt.Sprintf("; size %#x", o.Size)
}

// gen draws the sequence. It tracks only the model's size, so the sequence does
// not depend on what the file system under test does.
type gen struct {
	c     Config // normalized
	rng   *rand.Rand
	kinds []Kind
	cum   []int
	size  int64
}

func newGen(c Config) *gen {
	g := &gen{c: c, rng: rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))}
	total := 0
	for _, f := range c.Weights.fields() {
		if *f.p > 0 {
			total += *f.p
			g.kinds = append(g.kinds, f.kind)
			g.cum = append(g.cum, total)
		}
	}
	return g
}

// length draws an operation length up to limit (>= 1): a quarter of them short,
// to exercise sub-page and unaligned ranges, the rest uniform up to MaxOpLen.
func (g *gen) length(limit int64) int64 {
	bound := g.c.MaxOpLen
	if g.rng.IntN(4) == 0 {
		bound = min(bound, 512)
	}
	return 1 + g.rng.Int64N(min(bound, limit))
}

// next draws operation n (1-based) of a run of c.Ops; n == c.Ops+1 is the final
// check.
func (g *gen) next(n int) Op {
	op := Op{N: n}
	switch {
	case n > g.c.Ops:
		op.Kind = OpCheck // the final check
	case g.c.CheckEvery > 0 && n%g.c.CheckEvery == 0:
		op.Kind = OpCheck
	case g.c.ReopenEvery > 0 && n%g.c.ReopenEvery == 0:
		op.Kind = OpReopen
	default:
		r := g.rng.IntN(g.cum[len(g.cum)-1])
		for i, c := range g.cum {
			if r < c {
				op.Kind = g.kinds[i]
				break
			}
		}
	}
	switch op.Kind {
	case OpRead, OpMapRead, OpPunch:
		if g.size == 0 {
			op.Skip = true
			break
		}
		op.Off = g.rng.Int64N(g.size)
		op.Len = g.length(g.size - op.Off)
	case OpWrite, OpMapWrite, OpZero:
		op.Off = g.rng.Int64N(g.c.MaxLen)
		op.Len = g.length(g.c.MaxLen - op.Off)
		flag := g.rng.IntN(4) == 0
		op.Flag = flag && op.Kind != OpWrite
		if op.Kind != OpZero || !op.Flag {
			g.size = max(g.size, op.Off+op.Len)
		}
	case OpTruncate:
		op.Off = g.rng.Int64N(g.c.MaxLen + 1)
		g.size = op.Off
	case OpAppend:
		if g.size >= g.c.MaxLen {
			op.Skip = true
			break
		}
		op.Off = g.size
		op.Len = g.length(g.c.MaxLen - op.Off)
		g.size += op.Len
	}
	op.Size = g.size
	return op
}

// Plan returns the operations Run would do with cfg (without touching a file):
// cfg.Ops of them, then the final check, numbered cfg.Ops+1. The first n of a
// plan do not depend on cfg.Ops, so a run cut short at op n replays with Ops n.
func Plan(cfg Config) ([]Op, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	g := newGen(c)
	ops := make([]Op, c.Ops+1)
	for i := range ops {
		ops[i] = g.next(i + 1)
	}
	return ops, nil
}
