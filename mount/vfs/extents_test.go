package vfs

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestExtentsModel checks write, truncate and overlay against a byte slice.
func TestExtentsModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var x extents
		model := make([]byte, 0, 4096)
		have := make([]bool, 0, 4096)
		for op := 0; op < 50; op++ {
			if r.IntN(10) == 0 {
				size := r.IntN(4096)
				x.truncate(uint64(size))
				if size < len(model) {
					model, have = model[:size], have[:size]
				}
				continue
			}
			off, n := r.IntN(3000), 1+r.IntN(500)
			p := make([]byte, n)
			for k := range p {
				p[k] = byte(r.IntN(255) + 1)
			}
			x.Write(uint64(off), p)
			for len(model) < off+n {
				model, have = append(model, 0), append(have, false)
			}
			copy(model[off:], p)
			for k := off; k < off+n; k++ {
				have[k] = true
			}
		}
		for k := 1; k < len(x); k++ {
			if x[k-1].end() >= x[k].Off {
				t.Fatalf("round %d: extents %d and %d overlap or touch", round, k-1, k)
			}
		}
		buf := make([]byte, 4096)
		x.overlay(0, buf)
		for k := range model {
			want := byte(0)
			if have[k] {
				want = model[k]
			}
			if buf[k] != want {
				t.Fatalf("round %d: byte %d = %d, want %d", round, k, buf[k], want)
			}
		}
		if !bytes.Equal(buf[len(model):], make([]byte, 4096-len(model))) {
			t.Fatalf("round %d: bytes beyond the end", round)
		}
	}
}
