// Package lockd drives the lock manager (package lockmgr) for the server, as
// package consist drives the state table: it owns the lockmgr.Machine under
// one mutex, carries out its actions in order, and feeds their outcomes back.
//
// ActBacking becomes a non-blocking F_OFD_SETLK on an open file description
// the driver keeps per (file, owner), opened through Config.Open (the server
// opens the backing file by its handle), so that a process on the server
// machine that locks the file meets the remote owners' locks and the other way
// round. The driver holds its mutex across each input, the F_OFD_SETLK calls
// it leads to and the BackingDone inputs they answer (the machine's ordering
// rule: the backing file's locks change in the machine's order); F_OFD_SETLK
// never blocks. An open can (it breaks the server's own lease on a file a
// client caches dirty, and waits for the write-back): a request's owner gets
// its description before the mutex is taken (Config.Open), and the ones
// opened under it (a waiter granted by another owner's unlock) do not wait
// (Config.OpenNow: a failure is a refusal, tried again by Tick). A
// description is closed once its owner neither holds nor waits for a lock of
// the file.
//
// ActGranted becomes a call of Config.Granter (the protocol front end: the snfs
// protocol's CB_GRANTED, NLM's GRANTED later) in a goroutine of its own,
// outside the mutex, and its outcome GrantDone. No request holds a caller
// while it waits: a blocking Lock returns Blocked at once.
//
// It owns: the machine, the descriptions, the Tick goroutine (local retries,
// the end of the grace period) and the grant senders; Stop ends them all and
// closes every description.
//
// It must not: decide anything the machine decides, decode RPC, or know a
// protocol's client registrations (the front ends map their clients to
// lockmgr.ClientID and report ClientGone).
package lockd
