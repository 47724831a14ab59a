package xdr

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Decoding errors. Wrapped with detail; test with errors.Is.
var (
	ErrShort   = errors.New("xdr: input too short")
	ErrTooLong = errors.New("xdr: length exceeds limit")
	ErrBadBool = errors.New("xdr: boolean not 0 or 1")
	ErrBadEnum = errors.New("xdr: bad enum/discriminant value")
)

// Reader decodes XDR from a byte slice. The zero value is an empty reader.
type Reader struct {
	buf []byte
	off int
	err error
}

// NewReader returns a Reader over b. Slices it returns alias b.
func NewReader(b []byte) *Reader { return &Reader{buf: b} }

// Reset points r at b and clears any error.
func (r *Reader) Reset(b []byte) { r.buf, r.off, r.err = b, 0, nil }

// Err returns the first error seen, or nil.
func (r *Reader) Err() error { return r.err }

// SetErr records err as the reader's error if none is recorded yet; decoders use it
// to report semantic errors (a bad discriminant) through the same sticky path.
func (r *Reader) SetErr(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Remaining reports how many undecoded bytes are left.
func (r *Reader) Remaining() int { return len(r.buf) - r.off }

// Offset reports how many bytes have been consumed.
func (r *Reader) Offset() int { return r.off }

// Rest returns the undecoded bytes without consuming them.
func (r *Reader) Rest() []byte { return r.buf[r.off:] }

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.buf)-r.off {
		r.err = fmt.Errorf("%w: need %d bytes at offset %d, have %d", ErrShort, n, r.off, len(r.buf)-r.off)
		return nil
	}
	b := r.buf[r.off : r.off+n]
	r.off += n
	return b
}

// Uint32 decodes an unsigned int.
func (r *Reader) Uint32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// Int32 decodes an int.
func (r *Reader) Int32() int32 { return int32(r.Uint32()) }

// Uint64 decodes an unsigned hyper.
func (r *Reader) Uint64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// Int64 decodes a hyper.
func (r *Reader) Int64() int64 { return int64(r.Uint64()) }

// Bool decodes a bool; any value other than 0 or 1 is an error.
func (r *Reader) Bool() bool {
	v := r.Uint32()
	if v > 1 {
		r.SetErr(fmt.Errorf("%w: %d", ErrBadBool, v))
		return false
	}
	return v == 1
}

// Enum decodes an enum and checks it is below limit.
func (r *Reader) Enum(limit uint32) uint32 {
	v := r.Uint32()
	if r.err == nil && v >= limit {
		r.SetErr(fmt.Errorf("%w: %d (limit %d)", ErrBadEnum, v, limit))
		return 0
	}
	return v
}

// FixedOpaque decodes n bytes plus padding and returns them as a sub-slice.
func (r *Reader) FixedOpaque(n int) []byte {
	b := r.take(n)
	if pad := (4 - n%4) % 4; pad > 0 {
		r.take(pad)
	}
	if r.err != nil {
		return nil
	}
	return b
}

// Opaque decodes a variable-length opaque of at most max bytes, as a sub-slice.
func (r *Reader) Opaque(max int) []byte {
	n := r.Uint32()
	if r.err != nil {
		return nil
	}
	if int64(n) > int64(max) {
		r.SetErr(fmt.Errorf("%w: opaque of %d bytes, limit %d", ErrTooLong, n, max))
		return nil
	}
	return r.FixedOpaque(int(n))
}

// String decodes a string of at most max bytes (copied).
func (r *Reader) String(max int) string { return string(r.Opaque(max)) }

// ArrayLen decodes an array count, checking it against max and against the bytes
// left, assuming each element needs at least minElem bytes on the wire.
func (r *Reader) ArrayLen(max, minElem int) int {
	n := r.Uint32()
	if r.err != nil {
		return 0
	}
	if int64(n) > int64(max) {
		r.SetErr(fmt.Errorf("%w: array of %d elements, limit %d", ErrTooLong, n, max))
		return 0
	}
	if minElem > 0 && int64(n)*int64(minElem) > int64(r.Remaining()) {
		r.SetErr(fmt.Errorf("%w: array of %d elements cannot fit in %d bytes", ErrShort, n, r.Remaining()))
		return 0
	}
	return int(n)
}

// Writer appends XDR to a byte slice. The zero value is ready to use.
type Writer struct {
	buf []byte
}

// NewWriter returns a Writer that appends to b[:0].
func NewWriter(b []byte) *Writer { return &Writer{buf: b[:0]} }

// Bytes returns the encoded bytes.
func (w *Writer) Bytes() []byte { return w.buf }

// Len returns the number of bytes written.
func (w *Writer) Len() int { return len(w.buf) }

// Reset empties the writer, keeping its storage.
func (w *Writer) Reset() { w.buf = w.buf[:0] }

// Truncate cuts the output back to n bytes.
func (w *Writer) Truncate(n int) { w.buf = w.buf[:n] }

// Uint32 encodes an unsigned int.
func (w *Writer) Uint32(v uint32) { w.buf = binary.BigEndian.AppendUint32(w.buf, v) }

// Int32 encodes an int.
func (w *Writer) Int32(v int32) { w.Uint32(uint32(v)) }

// Uint64 encodes an unsigned hyper.
func (w *Writer) Uint64(v uint64) { w.buf = binary.BigEndian.AppendUint64(w.buf, v) }

// Int64 encodes a hyper.
func (w *Writer) Int64(v int64) { w.Uint64(uint64(v)) }

// Bool encodes a bool.
func (w *Writer) Bool(v bool) {
	if v {
		w.Uint32(1)
	} else {
		w.Uint32(0)
	}
}

var zeros [4]byte

// FixedOpaque encodes b plus padding.
func (w *Writer) FixedOpaque(b []byte) {
	w.buf = append(w.buf, b...)
	if pad := (4 - len(b)%4) % 4; pad > 0 {
		w.buf = append(w.buf, zeros[:pad]...)
	}
}

// Opaque encodes a variable-length opaque.
func (w *Writer) Opaque(b []byte) {
	w.Uint32(uint32(len(b)))
	w.FixedOpaque(b)
}

// String encodes a string.
func (w *Writer) String(s string) {
	w.Uint32(uint32(len(s)))
	w.buf = append(w.buf, s...)
	if pad := (4 - len(s)%4) % 4; pad > 0 {
		w.buf = append(w.buf, zeros[:pad]...)
	}
}

// Extend grows the output by n bytes and returns them for the caller to fill
// (e.g. by pread directly into a reply). Padding is not added; call Pad after
// shrinking with Truncate if fewer bytes were filled.
func (w *Writer) Extend(n int) []byte {
	l := len(w.buf)
	if cap(w.buf)-l < n {
		nb := make([]byte, l, 2*cap(w.buf)+n)
		copy(nb, w.buf)
		w.buf = nb
	}
	w.buf = w.buf[:l+n]
	return w.buf[l : l+n]
}

// Pad appends the padding for an opaque of n bytes.
func (w *Writer) Pad(n int) {
	if pad := (4 - n%4) % 4; pad > 0 {
		w.buf = append(w.buf, zeros[:pad]...)
	}
}

// Encoder is implemented by types that can write themselves as XDR.
type Encoder interface{ Encode(w *Writer) }

// Decoder is implemented by types that can read themselves from XDR.
type Decoder interface{ Decode(r *Reader) error }
