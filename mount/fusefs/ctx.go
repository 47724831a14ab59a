package fusefs

import (
	"context"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Which context a request is served with (docs/mount.md, "Interrupted
// requests").
//
// The kernel sends FUSE_INTERRUPT for a request whose calling thread got a
// signal while waiting for it; go-fuse then closes the request's Cancel
// channel (the fuse.Context a node method gets). Answering EINTR lets the
// process run its handler or die: a process blocked on a server that does not
// answer is otherwise stuck, even SIGKILL waits once the request was sent.
//
// Two kinds of request:
//
//   - Requests that only read (LOOKUP, GETATTR, READ, READLINK, ACCESS,
//     STATFS, READDIR, GETXATTR, LISTXATTR) and WRITE, whose every step the
//     vfs can abandon (it takes none of the data before it has room for it:
//     vfs.FS.Write) are served with reqCtx: cancelled on interrupt. Nothing
//     is half applied: a cancelled READ installs nothing in the cache, a
//     cancelled flush keeps its data dirty, a cancelled write-back is an
//     interrupted one (wbMoving), which the vfs already survives for a
//     broken connection.
//   - Requests that change the server's state (CREATE, MKDIR, REMOVE,
//     RENAME, SETATTR, LINK, SYMLINK, MKNOD, an OPEN or CLOSE of the snfs
//     protocol, APPEND, ALLOCATE, SETXATTR, REMOVEXATTR) and FLUSH, FSYNC
//     (a fenced write-back is reintegrated) and RELEASE are not abandoned
//     once begun: after EINTR the application (Go's
//     os package among them) tries again with a new request, not the
//     server's duplicate request cache's, so an exclusive create or a MKDIR
//     done once would fail EEXIST, an APPEND would land twice, an OPEN
//     abandoned would leave the server counting an open the client does not
//     have. They check the request's context before they start (begun) and
//     then run with the mount's, as a hard mount's calls do.
//
// Lock waits keep their own (lock.go, interruptible): a SETLKW interrupted is
// cancelled on the server.

// reqCtx is the context of a request that may be abandoned: the mount's life,
// ended also when the kernel interrupts the request. Call the returned
// function when the request is done.
func (b *bridge) reqCtx(ctx context.Context) (context.Context, func()) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return b.life, func() {}
	}
	c := &reqContext{life: b.life, intr: fc.Cancel}
	return c, c.end
}

// reqContext is reqCtx's context. Its Done channel, and the goroutine that
// closes it on the interrupt, are made only when something waits on it (an
// RPC): a request answered from the caches (a cached read, attributes still
// valid) costs neither.
type reqContext struct {
	life context.Context
	intr <-chan struct{} // closed by go-fuse on the kernel's interrupt

	mu    sync.Mutex
	ctx   context.Context // life's child, cancelled on intr; made at the first Done
	stop  context.CancelFunc
	ended bool
}

func (c *reqContext) Deadline() (time.Time, bool) { return c.life.Deadline() }
func (c *reqContext) Value(key any) any           { return c.life.Value(key) }

func (c *reqContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		if c.ended { // a use after the request: nothing left to interrupt
			return c.life.Done()
		}
		c.ctx, c.stop = context.WithCancel(c.life)
		select {
		case <-c.intr: // interrupted already: Done is closed from the start
			c.stop()
		default:
			ctx, intr, stop := c.ctx, c.intr, c.stop
			go func() { // ends with the request (end) or its interrupt
				select {
				case <-intr:
					stop()
				case <-ctx.Done():
				}
			}()
		}
	}
	return c.ctx.Done()
}

// Err agrees with Done: before Done is made, an interrupt already received is
// Canceled (and Done, made later, is closed from the start).
func (c *reqContext) Err() error {
	c.mu.Lock()
	ctx := c.ctx
	c.mu.Unlock()
	if ctx != nil {
		return ctx.Err()
	}
	select {
	case <-c.intr:
		return context.Canceled
	default:
	}
	return c.life.Err()
}

// end is called when the request is done: it ends the watching goroutine.
func (c *reqContext) end() {
	c.mu.Lock()
	c.ended = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// begun is the context of a request that must not be abandoned once begun
// (see above): the mount's life, or an error (EINTR) if the kernel
// interrupted the request before it began.
func (b *bridge) begun(ctx context.Context) (context.Context, error) {
	if fc, ok := ctx.(*fuse.Context); ok && fc.Cancel != nil {
		select {
		case <-fc.Cancel:
			return nil, context.Canceled
		default:
		}
	}
	return b.life, nil
}
