package cachemgr

import (
	"context"
	"sync"

	"snfs/mount/vfs"
)

// writeBackParallel bounds how many files a round of write-backs (the
// delayed write-back's, a sync's, an unmount's) sends at once. Each file's
// write-back is a few round trips one after the other (GETATTR of its base,
// WRITEs, COMMIT, then its CLOSE), so with one file at a time an unmount of
// many small dirty files costs their number times those round trips; files
// are independent (each has its own FlushMu and openMu), so they go side by
// side, as Linux's writeback of many inodes does.
const writeBackParallel = 8

// eachParallel runs f on every inode of is, at most writeBackParallel at
// once (once ctx is done, the rest one after the other: f is to return at
// once then), and returns when all have returned (it owns the goroutines).
func eachParallel(ctx context.Context, is []*vfs.Inode, f func(*vfs.Inode)) {
	if len(is) <= 1 {
		for _, i := range is {
			f(i)
		}
		return
	}
	sem := make(chan struct{}, writeBackParallel)
	var wg sync.WaitGroup
	for _, i := range is {
		if ctx.Err() != nil {
			f(i) // f sees the context done: nothing to wait for
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// writeBackAll writes back is (writeBackInode), several at once; it returns
// the inodes written back and the error of each that was not.
func (fs *snfsFS) writeBackAll(ctx context.Context, is []*vfs.Inode) (done []*vfs.Inode, failed map[*vfs.Inode]error) {
	var mu sync.Mutex
	failed = map[*vfs.Inode]error{}
	eachParallel(ctx, is, func(i *vfs.Inode) {
		err := ctx.Err() // one not started is not written back either
		if err == nil {
			err = fs.writeBackInode(ctx, i)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed[i] = err
			return
		}
		done = append(done, i)
	})
	return done, failed
}

// cleanCloseAll sends the CLOSEs of cleanClose for is, several at once.
func (fs *snfsFS) cleanCloseAll(ctx context.Context, is []*vfs.Inode) {
	eachParallel(ctx, is, func(i *vfs.Inode) { fs.cleanClose(ctx, i) })
}
