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
//     (a fenced write-back is reintegrated), FSYNCDIR (the modification
//     log, then the data of the files it made) and RELEASE are not abandoned
//     once begun: after EINTR the application (Go's
//     os package among them) tries again with a new request, not the
//     server's duplicate request cache's, so an exclusive create or a MKDIR
//     done once would fail EEXIST, an APPEND would land twice, an OPEN
//     abandoned would leave the server counting an open the client does not
//     have. They run with the mount's context (begun), as a hard
//     mount's calls do.
//
// Lock waits keep their own (lock.go, interruptible): a SETLKW interrupted is
// cancelled on the server.
//
// An interrupt ends a request only once the request has waited
// interruptGrace: any signal sends one (Go's runtime preempts with SIGURG, C
// programs have handlers with SA_RESTART, which FUSE's EINTR does not
// restart), and an application that never expected EINTR from a file system
// should not get it for a lookup or read that a server answering normally
// would have served a moment later. A request still waiting after the grace
// is waiting for a server that does not answer: then the interrupt ends it.

// reqCtx is the context of a request that may be abandoned: the mount's life,
// ended also when the kernel interrupts the request. Call the returned
// function when the request is done.
func (b *bridge) reqCtx(ctx context.Context) (context.Context, func()) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return b.life, func() {}
	}
	c := &reqContext{life: b.life, intr: fc.Cancel, start: time.Now(), grace: b.intrGrace}
	return c, c.end
}

// interruptGrace is how long a request waits before an interrupt ends it
// (see above).
const interruptGrace = time.Second

// reqContext is reqCtx's context. Its Done channel, and the goroutine that
// closes it on the interrupt, are made only when something waits on it (an
// RPC): a request answered from the caches (a cached read, attributes still
// valid) costs neither.
type reqContext struct {
	life  context.Context
	intr  <-chan struct{} // closed by go-fuse on the kernel's interrupt
	start time.Time       // when the request began
	grace time.Duration   // an interrupt ends the request only from start+grace

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
		if c.interruptedLocked() { // Done is closed from the start
			c.stop()
		} else {
			ctx, intr, stop, at := c.ctx, c.intr, c.stop, c.start.Add(c.grace)
			go func() { // ends with the request (end) or its interrupt
				select {
				case <-intr:
				case <-ctx.Done():
					return
				}
				if d := time.Until(at); d > 0 {
					t := time.NewTimer(d)
					defer t.Stop()
					select {
					case <-t.C:
					case <-ctx.Done():
						return
					}
				}
				stop()
			}()
		}
	}
	return c.ctx.Done()
}

// interruptedLocked: the kernel interrupted the request and its grace has
// passed. c.mu held.
func (c *reqContext) interruptedLocked() bool {
	select {
	case <-c.intr:
		return time.Since(c.start) >= c.grace
	default:
		return false
	}
}

// Err agrees with Done: before Done is made, an interrupt already received
// past the grace is Canceled (and Done, made later, is closed from the
// start).
func (c *reqContext) Err() error {
	c.mu.Lock()
	ctx := c.ctx
	interrupted := ctx == nil && c.interruptedLocked()
	c.mu.Unlock()
	if ctx != nil {
		return ctx.Err()
	}
	if interrupted {
		return context.Canceled
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
// (see above): the mount's life. An interrupt that came before it began is
// not honoured either: the request began at once, well within
// interruptGrace.
func (b *bridge) begun(ctx context.Context) (context.Context, error) {
	return b.life, nil
}
