// Package xdrtest holds the checks every XDR codec's tests share: the
// round trip of a value (encode, decode, every strict prefix refused) and the
// fuzz target that a decoder never panics and that what it accepts re-encodes
// to the same bytes' worth and the same value. snfs1, nlm4 and nsm call it
// from their tests; it is imported by tests only.
package xdrtest

import (
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"snfs/xdr"
)

// Codec is a type that encodes and decodes itself.
type Codec interface {
	xdr.Encoder
	xdr.Decoder
}

// Encode returns v's encoding.
func Encode(v xdr.Encoder) []byte {
	var w xdr.Writer
	v.Encode(&w)
	return w.Bytes()
}

// HexBytes decodes s, hex digits with any white space between them (a
// packet written out by hand, a word a line), failing t on anything else.
func HexBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RoundTrip checks that v encodes to whole XDR words that decode, into a
// fresh value from newV, to v with nothing left over, and that every strict
// prefix of the encoding is refused (an error, never a panic).
func RoundTrip(t *testing.T, v Codec, newV func() Codec) {
	t.Helper()
	b := Encode(v)
	if len(b)%4 != 0 {
		t.Fatalf("encoding of %d bytes is not a multiple of 4", len(b))
	}
	got := newV()
	r := xdr.NewReader(b)
	if err := got.Decode(r); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if r.Remaining() != 0 {
		t.Fatalf("%d bytes left over", r.Remaining())
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("decoded %+v, want %+v", got, v)
	}
	for n := 0; n < len(b); n++ {
		if err := newV().Decode(xdr.NewReader(b[:n])); err == nil {
			t.Fatalf("prefix of %d of %d bytes decodes", n, len(b))
		}
	}
}

// FuzzDecoder fuzzes T's decoder from the encodings of seeds and a few
// degenerate inputs: it must never panic, a value that decodes must encode to
// as many bytes as it consumed (non-zero padding, which the decoder
// tolerates, is the only freedom), and that encoding must decode to the same
// value.
func FuzzDecoder[T any, PT interface {
	*T
	Codec
}](f *testing.F, seeds ...PT) {
	for _, s := range seeds {
		f.Add(Encode(s))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var v T
		r := xdr.NewReader(b)
		if PT(&v).Decode(r) != nil {
			return
		}
		var out xdr.Writer
		PT(&v).Encode(&out)
		if out.Len() != r.Offset() {
			t.Fatalf("decoded %d bytes but re-encodes to %d", r.Offset(), out.Len())
		}
		var v2 T
		r2 := xdr.NewReader(out.Bytes())
		if err := PT(&v2).Decode(r2); err != nil {
			t.Fatalf("re-encoding %x does not decode: %v", out.Bytes(), err)
		}
		if r2.Remaining() != 0 {
			t.Fatalf("re-encoding leaves %d bytes", r2.Remaining())
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("decode(encode(v)) differs:\n%+v\n%+v", v, v2)
		}
	})
}
