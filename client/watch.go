package client

import (
	"log/slog"
	"time"

	"snfs/sunrpc"
)

// NotRespondingAfter is how long calls wait, none of them answered, before a
// server is logged as not responding (LogServerState). It is longer than a
// server holds a call while it calls other clients back (twice its callback
// timeout, 5 s by default: docs/protocol.md), so that a server busy with
// callbacks is not reported.
const NotRespondingAfter = 15 * time.Second

// LogServerState logs on log, as the Linux NFS client does, "server ADDR not
// responding, still trying" (a warning) once when the client's calls to the
// server at addr have waited after with none of them answered (0: the default
// NotRespondingAfter), and "server ADDR OK" once when it answers again: one
// pair per outage, however many calls wait. after < 0 logs nothing.
func LogServerState(log *slog.Logger, addr string, after time.Duration) sunrpc.DialOption {
	return TrackServerState(log, addr, after, nil)
}
