package consist

import (
	"context"
	"log/slog"
)

// Debug tracing of the table's per-file events (OPEN, CLOSE, plain accesses,
// callbacks, reclaims), for following one file through a crash test's logs.
// Files are named by fileid, as the mount's own debug log names them. Off
// unless the logger is at debug level: the fileid costs a resolve.

func (d *Driver) tracing() bool {
	return d.log != nil && d.log.Enabled(context.Background(), slog.LevelDebug)
}

// trace logs msg about the file fh names, with args, at debug level.
func (d *Driver) trace(msg string, fh []byte, args ...any) {
	if !d.tracing() {
		return
	}
	var fileid uint64
	if a := d.attrOf(fh); a != nil {
		fileid = a.FileID
	}
	d.log.Debug(msg, append([]any{"fileid", fileid}, args...)...)
}
