package snfs1

import (
	"snfs/state"
	"testing"

	"snfs/nfs3"
	"snfs/xdr/xdrtest"
)

// Every decoder is fuzzed (xdrtest.FuzzDecoder): it must never panic, a value that decodes must encode
// to as many bytes as it consumed (non-zero padding, which the decoder tolerates,
// is the only freedom), and that encoding must decode to the same value.

var fuzzOK = OpenOK{CacheVersion: 7, OldCacheVersion: 6, CacheEnabled: true, Attr: testAttr}

func FuzzRegisterArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &RegisterArgs{Name: []byte("client-a:/mnt"), ClientVerf: testVerf})
}
func FuzzRegisterRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &RegisterRes{Client: 3, ServerVerf: testVerf, CallbackTimeoutMs: 5000},
		&RegisterRes{Status: nfs3.ErrServerFault})
}
func FuzzOpenArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &OpenArgs{Client: 3, File: testFH, Mode: state.Write})
}
func FuzzOpenRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &OpenRes{OpenOK: fuzzOK}, &OpenRes{Status: ErrStaleClientID})
}
func FuzzOpenNameArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &OpenNameArgs{Client: 3, Where: nfs3.DirOpArgs{Dir: testFH, Name: "f.c"}, Mode: state.Read})
}
func FuzzOpenNameRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &OpenNameRes{File: testFH, OpenOK: fuzzOK}, &OpenNameRes{Status: nfs3.ErrNoEnt})
}
func FuzzCloseArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &CloseArgs{Client: 3, File: testFH, Mode: state.Write, Dirty: true})
}
func FuzzCloseRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &CloseRes{Attr: testAttr}, &CloseRes{Status: ErrFenced})
}
func FuzzCallbackArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &CallbackArgs{File: testFH, Mode: state.WritebackInvalidate, Attr: testAttr},
		&CallbackArgs{File: testFH, Mode: state.Relinquish})
}
func FuzzCallbackRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &CallbackRes{Status: state.TreatAsClosed})
}
func FuzzReclaimArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ReclaimArgs{Client: 3, Items: []ReclaimItem{
		{File: testFH, Readers: 1, Writers: 1, Caching: true, Dirty: true, Version: 9}, {File: testFH, Readers: 2, Version: 1}}},
		&ReclaimArgs{Client: 3})
}
func FuzzClientArgs(f *testing.F) { xdrtest.FuzzDecoder(f, &ClientArgs{Client: 3}) }
func FuzzStatusRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &StatusRes{}, &StatusRes{Status: ErrNoGrace})
}
func FuzzAppendArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &AppendArgs{File: testFH, Stable: nfs3.FileSync, Data: []byte("abc")})
}
func FuzzAppendRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &AppendRes{Offset: 9, Count: 3, Verf: [8]byte{1}, Wcc: nfs3.WccData{After: testAttr}},
		&AppendRes{Status: nfs3.ErrNoSpc})
}
func FuzzXattrArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &XattrArgs{File: testFH, Name: "user.tag"})
}
func FuzzGetXattrRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &GetXattrRes{Value: []byte("red")}, &GetXattrRes{Status: ErrNoXattr})
}
func FuzzSetXattrArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &SetXattrArgs{File: testFH, Option: XattrCreate, Name: "user.tag", Value: []byte("red")})
}
func FuzzXattrChangeRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &XattrChangeRes{Wcc: nfs3.WccData{After: testAttr}}, &XattrChangeRes{Status: ErrXattr2Big})
}
func FuzzListXattrsArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ListXattrsArgs{File: testFH, Cookie: 2, MaxCount: 4096})
}
func FuzzListXattrsRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ListXattrsRes{Cookie: 2, Names: []string{"user.a", "user.b"}, EOF: true},
		&ListXattrsRes{Status: nfs3.ErrTooSmall})
}
func FuzzAllocateArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &AllocateArgs{File: testFH, Mode: Deallocate, Offset: 4096, Length: 8192})
}
func FuzzAllocateRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &AllocateRes{Attr: testAttr}, &AllocateRes{Status: nfs3.ErrNoSpc})
}

func FuzzLockArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &LockArgs{Client: 3, File: testFH, Owner: 7, Type: LockWrite, Offset: 1, Length: 2, Block: true})
}
func FuzzLockRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &LockRes{Stat: LockDenied, Holder: LockHolder{Type: LockRead, Offset: 4, Local: true}},
		&LockRes{Stat: LockBlocked}, &LockRes{Status: nfs3.ErrStale}, &LockRes{Stat: LockGranted, Delegated: true})
}
func FuzzLockTArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &LockTArgs{Client: 3, File: testFH, Owner: 7, Type: LockRead, Length: 10})
}
func FuzzLockUArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &LockUArgs{Client: 3, File: testFH, Owner: 7, Length: 10},
		&LockUArgs{Client: 3, File: testFH, Owner: 7, Cancel: true, Type: LockWrite})
}
func FuzzGrantedArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &GrantedArgs{File: testFH, Owner: 7, Type: LockWrite, Offset: 1})
}
func FuzzGrantedRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &GrantedRes{Status: GrantedUnwanted})
}
func FuzzListDirArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ListDirArgs{Client: 3, ReaddirplusArgs: nfs3.ReaddirplusArgs{Dir: testFH, Cookie: 9, DirCount: 512, MaxCount: 4096}})
}
func FuzzListDirRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &ListDirRes{Promised: true, Dir: nfs3.ReaddirRes{Plus: true, DirAttr: testAttr, EOF: true,
		Entries: []nfs3.Entry{{FileID: 5, Name: "a", Cookie: 1, Attr: testAttr, Handle: testFH}}}},
		&ListDirRes{Status: ErrStaleClientID, Dir: nfs3.ReaddirRes{Plus: true}})
}
func FuzzDirReleaseArgs(f *testing.F) {
	xdrtest.FuzzDecoder(f, &DirReleaseArgs{Client: 3, Dirs: []nfs3.FH{testFH, testFH}}, &DirReleaseArgs{Client: 1, Dirs: []nfs3.FH{}})
}
func FuzzCreateOpenArgs(f *testing.F) {
	mode, size := uint32(0o644), uint64(0)
	xdrtest.FuzzDecoder(f,
		&CreateOpenArgs{Client: 3, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: testFH, Name: "f.c"}, Mode: nfs3.Unchecked, Attr: nfs3.Sattr{Mode: &mode, Size: &size}}},
		&CreateOpenArgs{Client: 3, Create: nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: testFH, Name: "g"}, Mode: nfs3.Exclusive, Verf: [8]byte{9}}})
}
func FuzzCreateOpenRes(f *testing.F) {
	xdrtest.FuzzDecoder(f, &CreateOpenRes{File: testFH, Attr: testAttr, DirWcc: nfs3.WccData{After: testAttr}, Open: OpenRes{OpenOK: fuzzOK}},
		&CreateOpenRes{File: testFH, Open: OpenRes{Status: nfs3.ErrJukebox}}, &CreateOpenRes{Status: nfs3.ErrExist})
}
