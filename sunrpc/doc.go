// Package sunrpc implements ONC RPC version 2 (RFC 5531) over TCP with record marking
// and over UDP: a server that dispatches calls to registered programs through a
// declarative procedure table, a duplicate request cache, and a client that keeps many
// calls in flight on one connection.
//
// What it owns: message framing and the call/reply headers, AUTH_NONE and AUTH_SYS
// credentials, RPC-level errors (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL,
// GARBAGE_ARGS, SYSTEM_ERR, AUTH_ERROR), the reply cache, bounded record sizes and the
// goroutines that serve connections.
//
// What it must not do: know anything about NFS or MOUNT. A program is a table of Proc
// values; the only thing the transport learns from a procedure is its name (for
// metrics) and whether its replies must be cached (Proc.Cache).
//
// Concurrency: every accepted connection has one reader goroutine owned by the Server;
// each call read from it runs in its own goroutine, bounded by Server.MaxInFlight, and
// replies are written under the connection's write lock in whatever order they finish.
// Shutdown stops the listeners, waits for every in-flight call, then closes connections.
package sunrpc
