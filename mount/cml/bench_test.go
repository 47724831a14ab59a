package cml

import (
	"fmt"
	"os"
	"testing"
)

// The cost of logging one change: Append (its own flush, or a share of a
// group commit when parallel) and AppendLazy (a write). What the mount's
// create loop pays per create instead of a CREATE round trip.

// benchDir is on the local disk (b.TempDir may be a tmpfs, whose flush
// costs nothing).
func benchDir(b *testing.B) string {
	d, err := os.MkdirTemp("/var/tmp", "snfs-cml-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func benchAppend(b *testing.B, lazy bool) { benchAppendBased(b, lazy, false) }

// benchAppendBased is benchAppend; based: each record gives its name's
// base (AppendLazyBased, as the mount logs its changes: one more frame
// field, no more writes).
func benchAppendBased(b *testing.B, lazy, based bool) {
	l, err := Open(benchDir(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		rec := createIn(dD, fmt.Sprintf("f%d", i))
		switch {
		case based:
			_, err = l.AppendLazyBased(rec, []Base{{Dir: dD.FH, Name: rec.Name}})
		case lazy:
			_, err = l.AppendLazy(rec)
		default:
			_, err = l.Append(rec)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend(b *testing.B)          { benchAppend(b, false) }
func BenchmarkAppendLazy(b *testing.B)      { benchAppend(b, true) }
func BenchmarkAppendLazyBased(b *testing.B) { benchAppendBased(b, true, true) }

func BenchmarkAppendParallel(b *testing.B) {
	l, err := Open(benchDir(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := l.Append(createIn(dD, fmt.Sprintf("f%d", i))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
