package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"snfs/nfs3"
)

// sillyRename hides child (open, about to lose its name in dir) under a new
// name in dir, removed at its last close.
func (fs *FS) sillyRename(ctx context.Context, dir *Inode, c Cred, name string, child *Inode) (bool, error) {
	if child.IsDir() {
		return false, nil // directories are not renamed away (RMDIR needs them empty anyway)
	}
	child.Mu.Lock()
	// A file with another link outlives this REMOVE: nothing to hide.
	open := child.Opens > 0 && child.SillyName == "" && child.Attr.Nlink <= 1
	child.Mu.Unlock()
	if !open {
		return false, nil
	}
	fs.Mu.Lock()
	fs.silly++
	hidden := fmt.Sprintf(".snfs%016x%04x", child.FileID, fs.silly&0xffff)
	fs.Mu.Unlock()
	res, err := RPC(ctx, fs, func() (*nfs3.RenameRes, error) { return fs.Client(c).Rename(ctx, dir.FH, name, dir.FH, hidden) })
	if res != nil {
		fs.dirWcc(dir, &res.FromWcc)
	}
	fs.ops.DirChanged(dir, name, nil, err)
	if err != nil {
		return false, err
	}
	fs.ops.DirChanged(dir, hidden, child, nil)
	child.Mu.Lock()
	child.InvalidateLocked()
	// The last release may have run during the RENAME, before the hidden
	// name was recorded: then nobody else removes it.
	closed := child.Opens == 0
	if !closed {
		child.SillyDir, child.SillyName = dir.FH, hidden
		child.nlinkDrop++ // until removeHidden
	}
	child.Mu.Unlock()
	if !closed {
		fs.countHidden(dir.FH, 1)
	}
	if closed {
		rres, err := RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Remove(ctx, dir.FH, hidden) })
		if rres != nil {
			fs.dirWcc(dir, &rres.Wcc)
		}
		fs.ops.DirChanged(dir, hidden, nil, err)
		if err == nil {
			fs.ops.Removed(child, 0)
		}
		return true, err
	}
	return true, nil
}

// Remove unlinks name from dir; child, if known, is the object it names: if
// it is open it is renamed to a hidden name instead, removed at its last close
// (REMOVE, RFC 1813 section 3.3.12).
func (fs *FS) Remove(ctx context.Context, dir *Inode, c Cred, name string, child *Inode) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	nlink := linksOf(child)
	// Before the change can reach the server (Ops.Removing), and undone
	// unless Removed runs.
	notRemoved := fs.ops.Removing(child, nlink)
	if done, err := fs.ops.LocalRemove(ctx, dir, c, name, child, false); done {
		// The mode gave child its attributes after (Ops.LocalRemove).
		if err == nil && child != nil {
			fs.ops.Removed(child, nlink)
		} else {
			notRemoved()
		}
		return err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		notRemoved()
		return err
	}
	if child != nil {
		if done, err := fs.sillyRename(ctx, dir, c, name, child); done || err != nil {
			notRemoved() // hidden, removed at its last close (snfsRelease drops its data first)
			return err
		}
	}
	res, err := RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Remove(ctx, dir.FH, name) })
	if res != nil {
		fs.dirWcc(dir, &res.Wcc)
	}
	fs.ops.DirChanged(dir, name, nil, err)
	if child != nil {
		child.Invalidate() // nlink and ctime changed
	}
	if err == nil {
		fs.ops.Removed(child, nlink)
	} else if notMade(err) {
		notRemoved()
	}
	return err
}

// notMade reports whether err, a REMOVE's or RENAME's, says for sure that
// the server removed no link: a status other than NOENT. A transport error
// or a cancellation leaves it unknown, and NOENT may answer a retransmission
// of one the server made: then a removal begun stays marked (Ops.Removing).
func notMade(err error) bool {
	var st nfs3.Status
	return errors.As(err, &st) && st != nfs3.ErrNoEnt
}

// Rmdir removes the directory name from dir (RMDIR, RFC 1813 section 3.3.13).
func (fs *FS) Rmdir(ctx context.Context, dir *Inode, c Cred, name string) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	if done, err := fs.ops.LocalRemove(ctx, dir, c, name, nil, true); done {
		return err
	}
	if err := fs.ops.BeforeDirChange(ctx, dir); err != nil {
		return err
	}
	gone := fs.hiddenGone.Load()
	res, err := RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Rmdir(ctx, dir.FH, name) })
	if res != nil {
		fs.dirWcc(dir, &res.Wcc)
	}
	if err == nfs3.ErrNotEmpty && fs.waitHiddenGone(ctx, dir, c, name, gone) {
		res = nil
		res, err = RPC(ctx, fs, func() (*nfs3.WccRes, error) { return fs.Client(c).Rmdir(ctx, dir.FH, name) })
		if res != nil {
			fs.dirWcc(dir, &res.Wcc)
		}
	}
	fs.ops.DirChanged(dir, name, nil, err)
	return err
}

// hiddenReleaseWait bounds how long an RMDIR refused as not empty waits for
// the hidden names of files removed while open to go (the kernel's RELEASE
// after the last close: on a loaded machine it came more than 2 s late, and
// the rmdir failed ENOTEMPTY).
const hiddenReleaseWait = 10 * time.Second

// countHidden adds n to the hidden names pending removal in dir.
func (fs *FS) countHidden(dir nfs3.FH, n int) {
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	if fs.hidden == nil {
		fs.hidden = make(map[string]int)
	}
	fs.hidden[string(dir)] += n
	if fs.hidden[string(dir)] == 0 {
		delete(fs.hidden, string(dir))
	}
}

// waitHiddenGone is for an RMDIR of dir/name the server refused as not
// empty: if the directory holds hidden names of files removed while open, it
// waits (bounded) until their last release has removed them and answers
// whether the RMDIR is worth sending again. The kernel sends RELEASE after
// close(2) has returned, so "unlink an open file, close it, rmdir its
// directory" would otherwise fail for a moment (pjdfstest unlink/14.t).
// gone is fs.hiddenGone from before the refused RMDIR: a hidden name removed
// since may have been the one that made the directory not empty.
func (fs *FS) waitHiddenGone(ctx context.Context, dir *Inode, c Cred, name string, gone uint64) bool {
	res, err := RPC(ctx, fs, func() (*nfs3.LookupRes, error) { return fs.Client(c).Lookup(ctx, dir.FH, name) })
	if err != nil {
		return false
	}
	key := string(res.Object)
	pending := func() bool {
		fs.Mu.Lock()
		defer fs.Mu.Unlock()
		return fs.hidden[key] > 0
	}
	if !pending() {
		return fs.hiddenGone.Load() != gone
	}
	deadline := time.NewTimer(hiddenReleaseWait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for pending() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// Rename moves from/name to to/newName (RENAME, RFC 1813 section 3.3.14);
// target, if known, is the object newName names now: if it is open it is
// hidden first (as Remove does).
// noReplace fails with NFS3ERR_EXIST when newName exists (checked with a
// LOOKUP first: NFSv3 has no atomic form).
//
// moved, if known (nil: not), is the object renamed: it is named newName in to
// afterwards (for the log's paths).
func (fs *FS) Rename(ctx context.Context, from *Inode, name string, to *Inode, newName string, c Cred, target, moved *Inode, noReplace bool) error {
	err := fs.rename(ctx, from, name, to, newName, c, target, moved, noReplace)
	if from != to && fs.ops.NamesKept(from) && !fs.ops.NamesKept(to) {
		// The kernel moves the name with the lifetime it had in from: one
		// from a directory whose names it may keep must not outlive that
		// in to (Ops.NamesKept; NotifyNames drops them all). Also after
		// an error: the server may have renamed it.
		fs.NotifyNames()
	}
	return err
}

func (fs *FS) rename(ctx context.Context, from *Inode, name string, to *Inode, newName string, c Cred, target, moved *Inode, noReplace bool) error {
	if err := fs.RefuseChange(); err != nil {
		return err
	}
	nlink := linksOf(target)
	// A RENAME over target removes a link of it (Ops.Removing); a rename
	// onto itself does not.
	over := target
	if from == to && name == newName {
		over = nil
	}
	removed, unknown := false, false
	notRemoved := fs.ops.Removing(over, nlink)
	defer func() {
		if !removed && !unknown {
			notRemoved()
		}
	}()
	if done, err := fs.ops.LocalRename(ctx, from, name, to, newName, c, target, noReplace); done {
		// The mode gave target its attributes after (as LocalRemove).
		if err == nil && over != nil {
			removed = true
			fs.ops.Removed(target, nlink)
		}
		if err == nil {
			fs.named(to, newName, moved)
		}
		return err
	}
	if err := fs.ops.BeforeDirChange(ctx, from, to); err != nil {
		return err
	}
	if noReplace {
		_, err := RPC(ctx, fs, func() (*nfs3.LookupRes, error) { return fs.Client(c).Lookup(ctx, to.FH, newName) })
		if err == nil {
			return nfs3.ErrExist
		} else if err != nfs3.ErrNoEnt {
			return err
		}
	}
	if target != nil {
		if _, err := fs.sillyRename(ctx, to, c, newName, target); err != nil {
			return err
		}
	}
	res, err := RPC(ctx, fs, func() (*nfs3.RenameRes, error) { return fs.Client(c).Rename(ctx, from.FH, name, to.FH, newName) })
	if errors.Is(err, nfs3.ErrNoEnt) && fs.renamedAlready(ctx, c, from, name, to, newName, moved) {
		err = nil
	}
	unknown = err != nil && !notMade(err)
	if res != nil {
		fs.dirWcc(from, &res.FromWcc)
		fs.dirWcc(to, &res.ToWcc)
	}
	if !(from == to && name == newName) {
		fs.ops.DirChanged(from, name, nil, err)
	}
	if toErr := err; toErr == nil && moved == nil {
		fs.ops.DirChanged(to, newName, nil, errNoObject) // newName names what the mount does not know
	} else {
		fs.ops.DirChanged(to, newName, moved, toErr)
	}
	if target != nil {
		target.Invalidate()
	}
	if err == nil && over != nil {
		removed = true
		fs.ops.Removed(target, nlink)
	}
	if err == nil {
		fs.named(to, newName, moved)
	}
	return err
}

// renamedAlready reports whether a RENAME of from/name to to/newName that
// was answered NFS3ERR_NOENT has its effect all the same: moved (the object
// renamed, if known) is named newName in to, and name no longer names it in
// from. So it is when the call was applied and its reply lost, and the call
// sent again (the server restarted between the rename and the saving of its
// reply, docs/protocol.md 2: the second execution finds no source), or when
// another client made the very same rename meanwhile: either way the
// application's rename is done, and NOENT would be a false error (found by
// tests/permits_soak_test.go: a mount's rename across a server kill).
func (fs *FS) renamedAlready(ctx context.Context, c Cred, from *Inode, name string, to *Inode, newName string, moved *Inode) bool {
	if moved == nil || len(moved.FH) == 0 {
		return false
	}
	lookup := func(dir *Inode, n string) (*nfs3.LookupRes, error) {
		return RPC(ctx, fs, func() (*nfs3.LookupRes, error) { return fs.Client(c).Lookup(ctx, dir.FH, n) })
	}
	now, err := lookup(to, newName)
	if err != nil || !bytes.Equal(now.Object, moved.FH) {
		return false
	}
	if old, err := lookup(from, name); err == nil && bytes.Equal(old.Object, moved.FH) {
		return false // still there too (a hard link): not this rename's doing
	} else if err != nil && !errors.Is(err, nfs3.ErrNoEnt) {
		return false
	}
	fs.log.Info("RENAME answered NOENT, but the object is at its new name: taken as done (its reply lost and the call sent again, or the same rename made by another client)",
		"to", newName, "fileid", moved.FileID)
	return true
}

// linksOf is i's link count as last seen (0 if i is nil).
func linksOf(i *Inode) uint32 {
	if i == nil {
		return 0
	}
	i.Mu.Lock()
	defer i.Mu.Unlock()
	return i.Attr.Nlink
}
