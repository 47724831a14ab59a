package vfs

import (
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
// node of its own for it, and the number goes with both; an inode the
// kernel knows by its own number keeps it.
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
	// and so does the number.
	ri.SetNode(&kernelNode{forgotten: true})
	fs.Forget(local)
	if fs.LookupInode(real) != nil {
		t.Error("the real inode, known to the kernel only through the local one, stayed")
	}
	ri = fs.Inode(real, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 77}, attrAlways)
	if got := ri.Ino(); got != (InoID{77, ri.Gen}) {
		t.Errorf("once neither inode is known: %+v; want the server's", got)
	}
	if got := fs.DirIno(DirEntry{Name: "a", FileID: 77}); got != 77 {
		t.Errorf("once neither inode is known, d_ino %d; want 77", got)
	}

	// A real inode with a kernel node of its own keeps its number; one
	// whose local inode goes while the kernel knows it keeps the local
	// number until it goes too.
	local2 := fs.Inode(nfs3.FH("\xfflocal2"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 2}, attrAlways)
	ri.SetNode(&kernelNode{})
	fs.KeepIno(local2, real, 77)
	if got := ri.Ino(); got != (InoID{77, ri.Gen}) {
		t.Errorf("a real inode the kernel knows: %+v; want its own", got)
	}
	real3 := nfs3.FH{3}
	local3 := fs.Inode(nfs3.FH("\xfflocal3"), &nfs3.Fattr{Type: nfs3.TypeReg, FileID: LocalIno | 3}, attrAlways)
	fs.KeepIno(local3, real3, 0)
	r3 := fs.Inode(real3, &nfs3.Fattr{Type: nfs3.TypeReg, FileID: 99}, attrAlways)
	r3.SetNode(&kernelNode{})
	fs.Forget(local3)
	if fs.LookupInode(real3) != r3 || r3.Ino().Ino != LocalIno|3 || fs.DirIno(DirEntry{FileID: 99}) != LocalIno|3 {
		t.Errorf("a real inode the kernel knows lost the local number with the local inode: %+v", r3.Ino())
	}
	fs.Forget(r3)
	if got := fs.DirIno(DirEntry{FileID: 99}); got != 99 {
		t.Errorf("both inodes gone: d_ino %d; want 99", got)
	}
}
