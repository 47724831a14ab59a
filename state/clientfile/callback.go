package clientfile

import "snfs/state"

// Callback is the token of a CB_CALLBACK being served, between CallbackBegin
// and the CallbackEnd that answers it.
type Callback struct {
	Mode      state.CallbackMode
	entering  bool // this callback started the pinned mode
	delayedWB bool // the delayed-close write-back was asked for
}

// CallbackBegin serves CB_CALLBACK of mode (docs/protocol.md 5.1). cacheHolds:
// the cache directory holds data of the file; writeThrough: data written
// through is not yet sent. The actions are the answer at once (ActAnswer:
// CB_STALE when nothing is held, CB_PINNED for the pinned holder after
// ActPinSync) or the work, then CallbackEnd.
//
// An OPEN in flight counts as held (its answer may have come before this
// callback, which then concerns it: CB_STALE would have the server drop the
// open it counted). A callback that invalidates is counted first, so that an
// OPEN in flight does not cache on its answer; caching stops before the
// write-back (a cache write after the write-back took the dirty data would
// be left behind it), and the cache goes after it.
func (f *File) CallbackBegin(mode state.CallbackMode, cacheHolds, writeThrough bool) (Callback, []Action) {
	cb := Callback{Mode: mode}
	held := cacheHolds || f.Held() > 0 || f.opening > 0 || f.caching || writeThrough
	if mode.Invalidates() {
		f.invals++
	}
	if !held {
		return cb, []Action{{Kind: ActAnswer, Outcome: state.Stale}}
	}
	if f.pin == pinEntered && f.holder && f.pt[state.Write] > 0 {
		// What the kernel wrote so far goes now; its opens go on writing.
		// The server counts this client as not caching: an OPEN in flight
		// does not cache on its answer either.
		f.invals++
		return cb, []Action{{Kind: ActPinSync}, {Kind: ActAnswer, Outcome: state.Pinned}}
	}
	var acts []Action
	if mode.Invalidates() {
		if f.pin == pinNone && f.pt[state.Read]+f.pt[state.Write] > 0 && f.hasData {
			f.pin, f.holder, cb.entering = pinEntering, f.pt[state.Write] > 0, true
			acts = append(acts, Action{Kind: ActPinEnter})
		}
		f.caching, f.kernVer = false, 0
		acts = append(acts, Action{Kind: ActStopCaching})
	}
	if mode.WritesBack() || cb.entering {
		acts = append(acts, Action{Kind: ActWriteBack})
	}
	if mode.Invalidates() {
		acts = append(acts, Action{Kind: ActInvalidateAttr}, Action{Kind: ActInvalidateCache}, Action{Kind: ActNotifyData})
	}
	return cb, acts
}

// CallbackEnd continues a callback once the driver has done the actions
// the last call returned: wbFailed reports a write-back among them that did
// not reach the server while the data is still held here (a transport
// error, a cancellation; not one the server refused, whose data is
// dropped), writeThrough data written through not yet sent. It returns
// ActAnswer last, or more work (a write-back) and then needs calling again.
//
// The answers (docs/protocol.md 5.1, 10): CB_PINNED from a client that just
// entered the pinned mode with writers; a failure (state.Failed: the driver
// answers an RPC error) when a write-back left data here; CB_TREAT_AS_CLOSED for a file only
// delayed closes hold, once everything is written back (the kept opens are
// forgotten, never CLOSEd), and for a file with no open at all (kept, the
// applications', in flight) and nothing left to write (a callback sent
// again after a broken connection lost the first answer); CB_OK otherwise.
func (f *File) CallbackEnd(cb *Callback, wbFailed, writeThrough bool) []Action {
	if cb.entering {
		cb.entering = false
		if f.pin == pinEntering { // not ended meanwhile by the last passthrough close
			f.pin = pinEntered
			// CB_PINNED only while the kernel still writes: the mount
			// today answers it whenever the entry began with writers,
			// and the server then records a new write open made
			// meanwhile as a pinned holder it is not (see the report of
			// issue 25 item 2).
			if f.holder && f.pt[state.Write] > 0 {
				return []Action{{Kind: ActAnswer, Outcome: state.Pinned}}
			}
		}
	}
	if wbFailed {
		// The write-back did not reach the server's stable storage and the
		// data is kept here: no answer may say done (docs/protocol.md 5.1).
		// The callback fails (an RPC error): the server fences this client
		// for the file, and the kept data is reintegrated (section 13).
		return []Action{{Kind: ActAnswer, Outcome: state.Failed}}
	}
	only := f.keptN() > 0 && f.apps() == 0 && f.opening == 0
	if only && !cb.delayedWB {
		cb.delayedWB = true
		return []Action{{Kind: ActWriteBack}}
	}
	if only && !wbFailed && !f.dirty {
		var acts []Action
		f.kept = [3]int{}
		if f.timer {
			f.timer = false
			acts = append(acts, Action{Kind: ActStopTimer})
		}
		f.caching = false
		return append(acts, Action{Kind: ActInvalidateAttr}, Action{Kind: ActNotifyAttr},
			Action{Kind: ActAnswer, Outcome: state.TreatAsClosed})
	}
	if f.apps() == 0 && f.opening == 0 && f.keptN() == 0 && !writeThrough && !f.dirty {
		f.caching = false // used again only after an OPEN
		return []Action{{Kind: ActAnswer, Outcome: state.TreatAsClosed}}
	}
	return []Action{{Kind: ActAnswer, Outcome: state.OK}}
}

// UnknownCallback is the answer to a callback for a file the client has no
// File of (no inode): CB_STALE if the cache directory holds nothing of it,
// else, without any work, CB_TREAT_AS_CLOSED to CB_RELINQUISH and CB_OK to
// the rest (what the client does today: see the report of issue 25 item 2
// on its dirty data).
func UnknownCallback(mode state.CallbackMode, cacheHolds bool) state.Outcome {
	switch {
	case !cacheHolds:
		return state.Stale
	case mode == state.Relinquish:
		return state.TreatAsClosed
	}
	return state.OK
}

// PinEnterFailed: the driver could not start the pinned mode an ActPinEnter
// asked for (the cache file could not be watched): the callback goes on as
// one without it (its write-back stays asked), and the kernel's passthrough
// opens go on unwatched, as before the callback.
func (f *File) PinEnterFailed(cb *Callback) {
	if cb.entering {
		cb.entering = false
		f.pin, f.holder = pinNone, false
	}
}
