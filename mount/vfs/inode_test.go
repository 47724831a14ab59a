package vfs

import (
	"testing"
	"time"

	"snfs/nfs3"
)

// A non-modifying call's attributes are dropped when a reply to a modifying
// call of this client came after the call began: found by the fsx tester on a
// mount (tests/mount_fsx_test.go, seed 29 under -race), where the kernel's
// readahead READ, sent before an ftruncate's SETATTR and answered after it, put
// the old size back and the next fstat reported it.
func TestStalePostOpAttributesDropped(t *testing.T) {
	fs := &FS{Cfg: Config{AcRegMin: 3 * time.Second, AcRegMax: 60 * time.Second}}
	fs.ops = NFSOps{fs}
	now := time.Now()
	i := &Inode{fs: fs, Type: nfs3.TypeReg}
	old := nfs3.Fattr{Type: nfs3.TypeReg, Size: 0x33a78, Mtime: nfs3.Time{Sec: 10}, Ctime: nfs3.Time{Sec: 10}}
	i.PostOpLocked(&old, fs.AttrStart(), now)

	readStart := fs.AttrStart() // a READ is sent
	truncated := old
	truncated.Size, truncated.Mtime, truncated.Ctime = 0x3f3ac, nfs3.Time{Sec: 11}, nfs3.Time{Sec: 11}
	i.WccLocked(&nfs3.WccData{Before: &nfs3.WccAttr{Size: old.Size, Mtime: old.Mtime, Ctime: old.Ctime},
		After: &truncated}, now) // the SETATTR's reply
	i.PostOpLocked(&old, readStart, now) // the READ's reply, with the attributes before the SETATTR
	if i.Attr.Size != truncated.Size {
		t.Fatalf("size %#x after a READ sent before the SETATTR answered after it, want %#x", i.Attr.Size, truncated.Size)
	}

	// A call sent after the change is taken (another client's change).
	later := truncated
	later.Size, later.Ctime = 0x100, nfs3.Time{Sec: 12}
	i.PostOpLocked(&later, fs.AttrStart(), now)
	if i.Attr.Size != later.Size {
		t.Fatalf("size %#x: attributes of a call sent after the change were dropped", i.Attr.Size)
	}

	// A modifying reply without post-op attributes (invalidation) also counts.
	getattrStart := fs.AttrStart()
	i.WccLocked(&nfs3.WccData{}, now)
	i.PostOpLocked(&old, getattrStart, now)
	if i.Attr.Size != later.Size || !i.AttrAt.IsZero() {
		t.Fatalf("size %#x, fetched at %v: a GETATTR sent before an invalidating change refilled the cache", i.Attr.Size, i.AttrAt)
	}
}

// A lock grant drops the cached attributes for good: a GETATTR (or a READ of
// the kernel's readahead) sent before the grant and answered after it carries
// attributes from before the lock holder's last writes, and must not refill
// the cache, or the size and mtime SQLite checks under its lock are stale.
func TestPostOpAttributesBeforeLockGrantDropped(t *testing.T) {
	fs := &FS{Cfg: Config{AcRegMin: 3 * time.Second, AcRegMax: 60 * time.Second}, nl: &nlmFS{}}
	fs.ops = NFSOps{fs}
	now := time.Now()
	i := &Inode{fs: fs, Type: nfs3.TypeReg}
	old := nfs3.Fattr{Type: nfs3.TypeReg, Size: 8192, Mtime: nfs3.Time{Sec: 10}, Ctime: nfs3.Time{Sec: 10}}
	i.PostOpLocked(&old, fs.AttrStart(), now)

	getattrStart := fs.AttrStart() // a GETATTR is sent
	fs.LockGranted(i)              // the lock is granted (the holder wrote since)
	i.Mu.Lock()
	i.PostOpLocked(&old, getattrStart, now) // the GETATTR's reply
	fetched := i.AttrAt
	i.Mu.Unlock()
	if !fetched.IsZero() {
		t.Fatalf("attributes fetched at %v: a GETATTR sent before a lock grant refilled the cache after it", fetched)
	}
	// A call sent after the grant is taken.
	newer := old
	newer.Size, newer.Mtime, newer.Ctime = 12288, nfs3.Time{Sec: 11}, nfs3.Time{Sec: 11}
	i.Mu.Lock()
	i.PostOpLocked(&newer, fs.AttrStart(), now)
	i.Mu.Unlock()
	if i.Attr.Size != newer.Size || i.AttrAt.IsZero() {
		t.Fatalf("size %d: attributes of a GETATTR sent after the grant were dropped", i.Attr.Size)
	}
}
