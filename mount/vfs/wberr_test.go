package vfs

import (
	"errors"
	"testing"

	"snfs/nfs3"
)

// TestWbErrPerFile: a write-back error latched on the inode reaches every
// open made before it at each close, however many closes (a forked child's
// first) come before the application's; an fsync takes it for its open
// only; an open made after it sees it only if nobody was told.
func TestWbErrPerFile(t *testing.T) {
	i := &Inode{}
	open := func() *File {
		f := &File{I: i}
		f.SampleWbErr()
		return f
	}
	a, b := open(), open()
	if err := a.ReportWbErr(nil, false); err != nil {
		t.Fatalf("close before any error: %v", err)
	}
	nospc := errors.New("WRITE at 0: NFS3ERR_NOSPC")
	i.Mu.Lock()
	i.LatchWbErrLocked(nospc)
	i.Mu.Unlock()
	late := open() // nobody told yet: sees it
	for k := range 3 {
		if err := a.ReportWbErr(nil, false); !errors.Is(err, nospc) {
			t.Fatalf("close %d of an open made before the error: %v, want it", k, err)
		}
	}
	if err := late.ReportWbErr(nil, false); !errors.Is(err, nospc) {
		t.Fatalf("close of an open made after an error nobody was told of: %v, want it", err)
	}
	if err := open().ReportWbErr(nil, false); err != nil {
		t.Fatalf("close of an open made after the error was reported: %v, want nil", err)
	}
	if err := b.ReportWbErr(nil, true); !errors.Is(err, nospc) {
		t.Fatalf("fsync: %v, want the error", err)
	}
	if err := b.ReportWbErr(nil, true); err != nil {
		t.Fatalf("the second fsync of the same open: %v, want nil (the first took it)", err)
	}
	if err := a.ReportWbErr(nil, false); !errors.Is(err, nospc) {
		t.Fatalf("close of another open after an fsync took it: %v, want it", err)
	}
	// Its own write-back's error is not returned twice.
	own := errors.New("COMMIT: NFS3ERR_IO")
	i.Mu.Lock()
	i.LatchWbErrLocked(own)
	i.Mu.Unlock()
	if err := b.ReportWbErr(own, true); err != own {
		t.Fatalf("fsync whose own write-back failed: %v, want only that error", err)
	}
	// A transport error with a latched one: both.
	if err := a.ReportWbErr(nfs3.ErrIO, false); !errors.Is(err, nfs3.ErrIO) || !errors.Is(err, own) {
		t.Fatalf("close with its own error and a latched one: %v, want both", err)
	}
}
