package nfs3

import (
	"testing"

	"snfs/xdr"
)

func encodedWrite(n int) []byte {
	var w xdr.Writer
	(&WriteArgs{File: make(FH, 30), Offset: 1 << 40, Count: uint32(n), Stable: FileSync, Data: make([]byte, n)}).Encode(&w)
	return w.Bytes()
}

// TestWriteDecodeDoesNotCopy: decoding a WRITE allocates nothing per byte; the data
// is a sub-slice of the request.
func TestWriteDecodeDoesNotCopy(t *testing.T) {
	for _, n := range []int{4096, 1 << 20} {
		in := encodedWrite(n)
		var a WriteArgs
		var r xdr.Reader
		allocs := testing.AllocsPerRun(100, func() {
			r.Reset(in)
			if a.Decode(&r) != nil {
				t.Fatal("decode failed")
			}
		})
		if allocs != 0 {
			t.Fatalf("decoding a %d-byte WRITE allocated %.0f times", n, allocs)
		}
		if &a.Data[0] != &in[len(in)-n] {
			t.Fatal("WRITE data was copied")
		}
	}
}

func BenchmarkDecodeWriteArgs1MiB(b *testing.B) {
	in := encodedWrite(1 << 20)
	var a WriteArgs
	var r xdr.Reader
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Reset(in)
		a.Decode(&r)
	}
}

func BenchmarkEncodeReadOK1MiB(b *testing.B) {
	w := xdr.NewWriter(make([]byte, 0, 2<<20))
	attr := &Fattr{}
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		w.Reset()
		EncodeReadOK(w, attr, 1<<20, func(buf []byte) (int, bool, error) { return len(buf), true, nil })
	}
}
