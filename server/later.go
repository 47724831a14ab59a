package server

import (
	"errors"
	"sync"

	"snfs/consist"
	"snfs/sunrpc"
	"snfs/xdr"
)

// later runs start, which must call its done exactly once: at once, or later
// from another goroutine (the consistency driver answering after callbacks).
// If done comes before start returns, finish writes the reply into w now
// (deferred false); otherwise the call's reply is deferred (its worker freed)
// and finish writes it when done comes (deferred true: the call's arguments no
// longer alias a live request buffer, see reDecode). consist.ErrGone drops the
// reply: finish then gets a nil writer, to release what it holds. later
// reports whether the reply was deferred (finish then owns everything the call
// holds). keep, if set, runs just before the reply is deferred, while the
// request buffer is still the call's: it copies what finish will need from it.
func later(c *sunrpc.Call, w *xdr.Writer, keep func(), start func(done func(error)), finish func(w *xdr.Writer, err error, deferred bool) error) (bool, error) {
	var mu sync.Mutex
	var d *sunrpc.Deferred // set when start returned without done; guarded by mu
	fired := false         // done came first; guarded by mu
	var early error        // its error; guarded by mu
	start(func(err error) {
		if errors.Is(err, consist.ErrJukebox) {
			c.NoCache = true // the retry must run again, not get this answer replayed
		}
		mu.Lock()
		if d == nil {
			fired, early = true, err
			mu.Unlock()
			return
		}
		mu.Unlock()
		if errors.Is(err, consist.ErrGone) {
			d.Drop()
			finish(nil, err, true)
			return
		}
		d.Reply(func(w *xdr.Writer) error { return finish(w, err, true) })
	})
	mu.Lock()
	defer mu.Unlock()
	if fired {
		if errors.Is(early, consist.ErrGone) {
			finish(nil, early, false)
			c.Defer().Drop()
			return true, nil
		}
		return false, finish(w, early, false)
	}
	if keep != nil {
		keep()
	}
	d = c.Defer()
	return true, nil
}
