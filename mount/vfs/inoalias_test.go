package vfs

import (
	"fmt"
	"log/slog"
	"testing"

	"snfs/nfs3"
)

// kernelNode stands for the bridge's node of an inode (SetNode): known to
// the kernel until forgotten.
type kernelNode struct{ forgotten bool }

func (n *kernelNode) Forgotten() bool { return n.forgotten }

// TestKeepIno: the object a local inode stood for is reported with that
// inode's number and generation, by its inode (one made before or after
// KeepIno) and in a listing without handles, while either inode is known;
// dropping the local inode drops the real one too when the kernel has no
// node of its own for it, and the number stays with the object's handle
// (not its file id); an inode the kernel knows by a number keeps it.
func TestKeepIno(t *testing.T) {
	fs := &FS{Inodes: map[string]*Inode{}, log: slog.Default()}
	fs.ops = NFSOps{fs}
	local := fs.Inode(nfs3.FH("\xfflocal1"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 1}, attrAlways)
	want := InoID{LocalIno | 1, local.Gen}
	real := nfs3.FH{1, 2, 3}
	fs.KeepIno(local, real, 77)
	ri := fs.Inode(real, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 77}, attrAlways)
	if got := ri.Ino(); got != want {
		t.Fatalf("the real inode's number %+v; want the local one's %+v", got, want)
	}
	if got := fs.DirIno(DirEntry{Name: "a", FileID: 77}); got != want.Ino {
		t.Errorf("a listing's d_ino %d; want %d", got, want.Ino)
	}
	if got := fs.DirIno(DirEntry{Name: "b", FileID: 78}); got != 78 {
		t.Errorf("another object's d_ino %d; want its file id", got)
	}
	if fs.InoHolder(ri) != local || fs.KeptBy(local) != ri {
		t.Error("InoHolder, KeptBy: not the local inode and the real one")
	}

	// The real inode dropped (its kernel node forgotten): a new one made
	// while the local inode is known gets the number again.
	fs.Forget(ri)
	ri = fs.Inode(real, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 77}, attrAlways)
	if got := ri.Ino(); got != want {
		t.Fatalf("a real inode made again: %+v; want %+v", got, want)
	}
	// The local inode dropped; the real one has no kernel node: both go,
	// and the number stays with the object's handle: an inode of it made
	// again has it (the kernel may have forgotten both nodes while the
	// object lives on: the mount's permit ends drop every name).
	ri.SetNode(&kernelNode{forgotten: true})
	fs.Forget(local)
	if fs.LookupInode(real) != nil {
		t.Error("the real inode, known to the kernel only through the local one, stayed")
	}
	if got := fs.DirIno(DirEntry{Name: "a", FileID: 77}); got != 77 {
		t.Errorf("once neither inode is known, d_ino by file id %d; want 77 (a file id may be reused)", got)
	}
	ri = fs.Inode(real, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 77}, attrAlways)
	if got := ri.Ino(); got != want {
		t.Errorf("an inode made again once neither was known: %+v; want %+v", got, want)
	}
	if got := fs.DirIno(DirEntry{Name: "a", FileID: 77}); got != want.Ino {
		t.Errorf("its d_ino by file id %d; want %d", got, want.Ino)
	}

	// A real inode with a kernel node of its own keeps the number the
	// kernel knows it by; one whose local inode goes while the kernel
	// knows it keeps the local number until it goes too.
	local2 := fs.Inode(nfs3.FH("\xfflocal2"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 2}, attrAlways)
	ri.SetNode(&kernelNode{})
	fs.KeepIno(local2, real, 77)
	if got := ri.Ino(); got != want {
		t.Errorf("a real inode the kernel knows: %+v; want the number it has, %+v", got, want)
	}
	real4 := nfs3.FH{4}
	r4 := fs.Inode(real4, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 44}, attrAlways)
	r4.SetNode(&kernelNode{})
	fs.KeepIno(fs.Inode(nfs3.FH("\xfflocal4"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 4}, attrAlways), real4, 44)
	if got := r4.Ino(); got != (InoID{44, r4.Gen}) {
		t.Errorf("a real inode the kernel knows by its file id: %+v; want its own", got)
	}
	real3 := nfs3.FH{3}
	local3 := fs.Inode(nfs3.FH("\xfflocal3"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 3}, attrAlways)
	fs.KeepIno(local3, real3, 0)
	r3 := fs.Inode(real3, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 99}, attrAlways)
	n3 := &kernelNode{}
	r3.SetNode(n3)
	fs.Forget(local3)
	if fs.LookupInode(real3) != r3 || r3.Ino().Ino != LocalIno|3 || fs.DirIno(DirEntry{FileID: 99}) != LocalIno|3 {
		t.Errorf("a real inode the kernel knows lost the local number with the local inode: %+v", r3.Ino())
	}
	n3.forgotten = true // the kernel's FORGET of r3's own node
	fs.Forget(r3)
	if got := fs.DirIno(DirEntry{FileID: 99}); got != 99 {
		t.Errorf("both inodes gone: d_ino by file id %d; want 99", got)
	}
	if got := fs.Inode(real3, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 99}, attrAlways).Ino().Ino; got != LocalIno|3 {
		t.Errorf("both inodes gone, an inode made again: %d; want the local number", got)
	}
}

// TestForgetRacingLookup: a FORGET that races with a LOOKUP handing the
// kernel another node of the object does not leave the kernel's node on an
// inode the table no longer has (callbacks, which find inodes by handle,
// would miss its dirty data: the stale read of
// TestMountSNFSPermitsDataReadBack). The local inode's FORGET while the
// real inode's new node is recorded live keeps the real inode; a FORGET
// of an inode whose node was replaced by a live one keeps it; and an
// inode dropped before its new node was recorded is put back by Known,
// with its kept number and its holder's alias.
func TestForgetRacingLookup(t *testing.T) {
	fs := &FS{Inodes: map[string]*Inode{}, log: slog.Default()}
	fs.ops = NFSOps{fs}
	local := fs.Inode(nfs3.FH("\xfflocal1"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 1}, attrAlways)
	real := nfs3.FH{1, 2, 3}
	fs.KeepIno(local, real, 77)
	ri := fs.Inode(real, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 77}, attrAlways)
	want := ri.Ino()

	// The real inode's new node recorded live: the local inode's FORGET
	// keeps it.
	ri.SetNode(&kernelNode{})
	fs.Forget(local)
	if fs.LookupInode(real) != ri {
		t.Fatal("the local inode's FORGET dropped the real inode the kernel has a live node of")
	}
	// An old node's FORGET after a new live node was recorded keeps it.
	fs.Forget(ri)
	if fs.LookupInode(real) != ri {
		t.Fatal("an old node's FORGET dropped an inode whose recorded node is live")
	}

	// Dropped before the lookup recorded its node (the bridge's window):
	// Known puts it back, with its number.
	local2 := fs.Inode(nfs3.FH("\xfflocal2"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 2}, attrAlways)
	real2 := nfs3.FH{4, 5, 6}
	fs.KeepIno(local2, real2, 88)
	r2 := fs.Inode(real2, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 88}, attrAlways)
	fs.Forget(local2) // r2 has no node yet: dropped with it
	if fs.LookupInode(real2) != nil {
		t.Fatal("setup: the real inode known only through the local one stayed")
	}
	fs.Known(r2)
	if fs.LookupInode(real2) != r2 || fs.DirIno(DirEntry{FileID: 88}) != r2.Ino().Ino || r2.Ino().Ino != LocalIno|2 {
		t.Errorf("Known: the real inode not back in the table with its number: %v %+v", fs.LookupInode(real2) == r2, r2.Ino())
	}
	fs.Known(local2)
	if fs.LookupInode(local2.FH) != local2 || fs.KeptBy(local2) != r2 || fs.InoHolder(r2) != local2 {
		t.Error("Known: the local inode not back as the holder of the real one's number")
	}
	// The bridge's FORGET of the node recorded drops the inode, even when
	// that node still looks live (go-fuse keeps a parent whose name another
	// node took); of an older node, it keeps it.
	stuck := &kernelNode{}
	r2.SetNode(stuck)
	fs.NodeForgotten(r2, &kernelNode{forgotten: true})
	if fs.LookupInode(real2) != r2 {
		t.Error("an older node's FORGET dropped the inode a live node was recorded for since")
	}
	fs.NodeForgotten(r2, stuck)
	if fs.LookupInode(real2) != nil {
		t.Error("the FORGET of the node recorded kept the inode")
	}
	// Known of an inode whose handle has another inode now changes nothing.
	other := &Inode{fs: fs, FH: append(nfs3.FH(nil), real...), Type: nfs3.TypeReg, FileID: 77}
	fs.Known(other)
	if fs.LookupInode(real) != ri || ri.Ino() != want {
		t.Error("Known replaced the inode the table has for the handle")
	}
}

// TestKeepInoBounded: the numbers kept for objects no inode of which is
// known are at most maxAliases (one forgotten for each new one past it).
func TestKeepInoBounded(t *testing.T) {
	fs := &FS{Inodes: map[string]*Inode{}, log: slog.Default()}
	fs.ops = NFSOps{fs}
	for n := uint64(1); n <= maxAliases+10; n++ {
		local := fs.Inode(nfs3.FH(fmt.Sprintf("\xfflocal%d", n)), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | n}, attrAlways)
		fs.KeepIno(local, nfs3.FH(fmt.Sprintf("real%d", n)), n)
		fs.Forget(local)
	}
	fs.Mu.Lock()
	got := len(fs.aliases)
	fs.Mu.Unlock()
	if got > maxAliases {
		t.Errorf("%d numbers kept for objects no inode of which is known; at most %d", got, maxAliases)
	}
}
