package snfs1

import (
	"reflect"
	"snfs/state"
	"testing"

	"snfs/nfs3"
	"snfs/xdr"
)

// Every decoder is fuzzed: it must never panic, a value that decodes must encode
// to as many bytes as it consumed (non-zero padding, which the decoder tolerates,
// is the only freedom), and that encoding must decode to the same value.

func fuzzDecoder[T any, PT interface {
	*T
	xdr.Decoder
	xdr.Encoder
}](f *testing.F, seeds ...PT) {
	for _, s := range seeds {
		f.Add(encode(s))
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

var fuzzOK = OpenOK{CacheVersion: 7, OldCacheVersion: 6, CacheEnabled: true, Attr: testAttr}

func FuzzRegisterArgs(f *testing.F) {
	fuzzDecoder(f, &RegisterArgs{Name: []byte("client-a:/mnt"), ClientVerf: testVerf})
}
func FuzzRegisterRes(f *testing.F) {
	fuzzDecoder(f, &RegisterRes{Client: 3, ServerVerf: testVerf, CallbackTimeoutMs: 5000},
		&RegisterRes{Status: nfs3.ErrServerFault})
}
func FuzzOpenArgs(f *testing.F) {
	fuzzDecoder(f, &OpenArgs{Client: 3, File: testFH, Mode: state.Write})
}
func FuzzOpenRes(f *testing.F) {
	fuzzDecoder(f, &OpenRes{OpenOK: fuzzOK}, &OpenRes{Status: ErrStaleClientID})
}
func FuzzOpenNameArgs(f *testing.F) {
	fuzzDecoder(f, &OpenNameArgs{Client: 3, Where: nfs3.DirOpArgs{Dir: testFH, Name: "f.c"}, Mode: state.Read})
}
func FuzzOpenNameRes(f *testing.F) {
	fuzzDecoder(f, &OpenNameRes{File: testFH, OpenOK: fuzzOK}, &OpenNameRes{Status: nfs3.ErrNoEnt})
}
func FuzzCloseArgs(f *testing.F) {
	fuzzDecoder(f, &CloseArgs{Client: 3, File: testFH, Mode: state.Write, Dirty: true})
}
func FuzzCloseRes(f *testing.F) {
	fuzzDecoder(f, &CloseRes{Attr: testAttr}, &CloseRes{Status: ErrFenced})
}
func FuzzCallbackArgs(f *testing.F) {
	fuzzDecoder(f, &CallbackArgs{File: testFH, Mode: state.WritebackInvalidate, Attr: testAttr},
		&CallbackArgs{File: testFH, Mode: state.Relinquish})
}
func FuzzCallbackRes(f *testing.F) {
	fuzzDecoder(f, &CallbackRes{Status: state.TreatAsClosed})
}
func FuzzReclaimArgs(f *testing.F) {
	fuzzDecoder(f, &ReclaimArgs{Client: 3, Items: []ReclaimItem{
		{File: testFH, Readers: 1, Writers: 1, Caching: true, Dirty: true, Version: 9}, {File: testFH, Readers: 2, Version: 1}}},
		&ReclaimArgs{Client: 3})
}
func FuzzClientArgs(f *testing.F) { fuzzDecoder(f, &ClientArgs{Client: 3}) }
func FuzzStatusRes(f *testing.F) {
	fuzzDecoder(f, &StatusRes{}, &StatusRes{Status: ErrNoGrace})
}
func FuzzAppendArgs(f *testing.F) {
	fuzzDecoder(f, &AppendArgs{File: testFH, Stable: nfs3.FileSync, Data: []byte("abc")})
}
func FuzzAppendRes(f *testing.F) {
	fuzzDecoder(f, &AppendRes{Offset: 9, Count: 3, Verf: [8]byte{1}, Wcc: nfs3.WccData{After: testAttr}},
		&AppendRes{Status: nfs3.ErrNoSpc})
}
func FuzzXattrArgs(f *testing.F) {
	fuzzDecoder(f, &XattrArgs{File: testFH, Name: "user.tag"})
}
func FuzzGetXattrRes(f *testing.F) {
	fuzzDecoder(f, &GetXattrRes{Value: []byte("red")}, &GetXattrRes{Status: ErrNoXattr})
}
func FuzzSetXattrArgs(f *testing.F) {
	fuzzDecoder(f, &SetXattrArgs{File: testFH, Option: XattrCreate, Name: "user.tag", Value: []byte("red")})
}
func FuzzXattrChangeRes(f *testing.F) {
	fuzzDecoder(f, &XattrChangeRes{Wcc: nfs3.WccData{After: testAttr}}, &XattrChangeRes{Status: ErrXattr2Big})
}
func FuzzListXattrsArgs(f *testing.F) {
	fuzzDecoder(f, &ListXattrsArgs{File: testFH, Cookie: 2, MaxCount: 4096})
}
func FuzzListXattrsRes(f *testing.F) {
	fuzzDecoder(f, &ListXattrsRes{Cookie: 2, Names: []string{"user.a", "user.b"}, EOF: true},
		&ListXattrsRes{Status: nfs3.ErrTooSmall})
}
func FuzzAllocateArgs(f *testing.F) {
	fuzzDecoder(f, &AllocateArgs{File: testFH, Mode: Deallocate, Offset: 4096, Length: 8192})
}
func FuzzAllocateRes(f *testing.F) {
	fuzzDecoder(f, &AllocateRes{Attr: testAttr}, &AllocateRes{Status: nfs3.ErrNoSpc})
}

func FuzzLockArgs(f *testing.F) {
	fuzzDecoder(f, &LockArgs{Client: 3, File: testFH, Owner: 7, Type: LockWrite, Offset: 1, Length: 2, Block: true})
}
func FuzzLockRes(f *testing.F) {
	fuzzDecoder(f, &LockRes{Stat: LockDenied, Holder: LockHolder{Type: LockRead, Offset: 4, Local: true}},
		&LockRes{Stat: LockBlocked}, &LockRes{Status: nfs3.ErrStale}, &LockRes{Stat: LockGranted, Delegated: true})
}
func FuzzLockTArgs(f *testing.F) {
	fuzzDecoder(f, &LockTArgs{Client: 3, File: testFH, Owner: 7, Type: LockRead, Length: 10})
}
func FuzzLockUArgs(f *testing.F) {
	fuzzDecoder(f, &LockUArgs{Client: 3, File: testFH, Owner: 7, Length: 10},
		&LockUArgs{Client: 3, File: testFH, Owner: 7, Cancel: true, Type: LockWrite})
}
func FuzzGrantedArgs(f *testing.F) {
	fuzzDecoder(f, &GrantedArgs{File: testFH, Owner: 7, Type: LockWrite, Offset: 1})
}
func FuzzGrantedRes(f *testing.F) {
	fuzzDecoder(f, &GrantedRes{Status: GrantedUnwanted})
}
func FuzzListDirArgs(f *testing.F) {
	fuzzDecoder(f, &ListDirArgs{Client: 3, ReaddirplusArgs: nfs3.ReaddirplusArgs{Dir: testFH, Cookie: 9, DirCount: 512, MaxCount: 4096}})
}
func FuzzListDirRes(f *testing.F) {
	fuzzDecoder(f, &ListDirRes{Promised: true, Dir: nfs3.ReaddirRes{Plus: true, DirAttr: testAttr, EOF: true,
		Entries: []nfs3.Entry{{FileID: 5, Name: "a", Cookie: 1, Attr: testAttr, Handle: testFH}}}},
		&ListDirRes{Status: ErrStaleClientID, Dir: nfs3.ReaddirRes{Plus: true}})
}
func FuzzDirReleaseArgs(f *testing.F) {
	fuzzDecoder(f, &DirReleaseArgs{Client: 3, Dirs: []nfs3.FH{testFH, testFH}}, &DirReleaseArgs{Client: 1, Dirs: []nfs3.FH{}})
}
