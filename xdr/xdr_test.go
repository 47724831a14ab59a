package xdr

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var w Writer
	w.Uint32(7)
	w.Int32(-2)
	w.Uint64(1 << 40)
	w.Bool(true)
	w.Opaque([]byte("abcde"))
	w.String("xy")
	w.FixedOpaque([]byte{1, 2, 3})
	if w.Len()%4 != 0 {
		t.Fatalf("length %d not a multiple of 4", w.Len())
	}
	r := NewReader(w.Bytes())
	if v := r.Uint32(); v != 7 {
		t.Errorf("Uint32 = %d", v)
	}
	if v := r.Int32(); v != -2 {
		t.Errorf("Int32 = %d", v)
	}
	if v := r.Uint64(); v != 1<<40 {
		t.Errorf("Uint64 = %d", v)
	}
	if !r.Bool() {
		t.Error("Bool = false")
	}
	if v := r.Opaque(10); !bytes.Equal(v, []byte("abcde")) {
		t.Errorf("Opaque = %q", v)
	}
	if v := r.String(10); v != "xy" {
		t.Errorf("String = %q", v)
	}
	if v := r.FixedOpaque(3); !bytes.Equal(v, []byte{1, 2, 3}) {
		t.Errorf("FixedOpaque = %v", v)
	}
	if r.Err() != nil || r.Remaining() != 0 {
		t.Errorf("err %v, remaining %d", r.Err(), r.Remaining())
	}
}

func TestBounds(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		read func(r *Reader)
		want error
	}{
		{"short uint32", []byte{0, 0}, func(r *Reader) { r.Uint32() }, ErrShort},
		{"opaque over limit", []byte{0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0}, func(r *Reader) { r.Opaque(8) }, ErrTooLong},
		{"opaque longer than input", []byte{0x00, 0xff, 0xff, 0xff}, func(r *Reader) { r.Opaque(1 << 30) }, ErrShort},
		{"bool 2", []byte{0, 0, 0, 2}, func(r *Reader) { r.Bool() }, ErrBadBool},
		{"huge array", []byte{0xff, 0xff, 0xff, 0xff}, func(r *Reader) { r.ArrayLen(1<<31, 4) }, ErrTooLong},
		{"array larger than input", []byte{0, 0, 1, 0}, func(r *Reader) { r.ArrayLen(1<<20, 4) }, ErrShort},
		{"enum out of range", []byte{0, 0, 0, 3}, func(r *Reader) { r.Enum(3) }, ErrBadEnum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(tt.in)
			tt.read(r)
			if !errors.Is(r.Err(), tt.want) {
				t.Fatalf("err = %v, want %v", r.Err(), tt.want)
			}
			// Sticky: further reads return zero values and keep the first error.
			if r.Uint32() != 0 || !errors.Is(r.Err(), tt.want) {
				t.Fatal("error not sticky")
			}
		})
	}
}

func TestOpaqueAliasesInput(t *testing.T) {
	var w Writer
	w.Opaque(make([]byte, 1<<16))
	in := w.Bytes()
	allocs := testing.AllocsPerRun(100, func() {
		r := NewReader(in)
		_ = r.Opaque(1 << 20)
	})
	if allocs > 1 { // the Reader itself
		t.Fatalf("decoding a 64 KiB opaque allocated %.0f times", allocs)
	}
}
