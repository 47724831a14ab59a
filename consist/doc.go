// Package consist drives the Spritely NFS state table (package state) for the
// server: it turns the table's actions into CALLBACK and CB_NULL calls on each
// client's own connection, answers parked OPENs and plain NFS accesses, runs the
// sweeper, keeps what must survive a restart (client registrations, the version
// mark) in a bbolt database in the state directory, and exports the table's
// metrics.
//
// It owns: client registrations (name, boot verifier, client id, callback
// connection), the interning of clients into the table's ids (protocol clients
// by registration, plain NFSv3 clients by address), parked requests and their
// continuations, the callback senders (bounded; a callback's deadline starts
// when it is written, not when it is queued), and the sweeper goroutine. The
// answers to callbacks and probes are applied to the table by the client
// connection's reader (sunrpc.Conn.CallRouted), before it reads the client's
// next call: a client's OPEN sent after its answer sees the answer applied.
// The table times callbacks out; the driver keeps listening for another
// callback timeout and hands late answers to the table. A probe waits for its
// answer as long as the client keeps that callback path.
//
// It also drives the directory promises' table (state.Dirs, dirs.go): breaks
// are sent as callbacks are, and a change's reply waits until its breaks
// have ended (DirChanged), as a parked request does.
//
// It must not: decide anything the table decides (cacheability, which
// callbacks, fencing, versions), decode NFS or SNFS requests (package server
// does, and calls Open, Close, Access), touch exported files, or hold a server
// worker for a parked request: a parked request's answer is a continuation run
// by whoever delivers the action (a callback's completion, the sweeper), and the
// server defers the RPC reply meanwhile (sunrpc.Call.Defer).
//
// Time: the driver reads the time it gives the table, and arms its timers
// (a sender slot's deadline, the grace bound, the sweeper's reading), from
// Config.Clock (clock.go), so that a test moves it past a timeout instead of
// waiting; latencies reported as metrics are real durations.
//
// Concurrency: the table serializes transitions per file. The Driver's mutex
// guards its own maps only and is never held while calling the table or doing
// I/O. Every goroutine it starts (sweeper, callback and probe senders,
// continuations) is tracked and stopped by Stop.
package consist
