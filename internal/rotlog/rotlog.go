// Package rotlog is a log file of bounded size: a Writer appends to a file
// and, when a write would take it past its limit, renames it to NAME.1
// (replacing the previous one) and starts a new, empty file. At most twice the
// limit is on disk, so a log nobody reads cannot fill the disk. A detached
// `snfs mount` logs through one when it is given no log file.
//
// What it owns: the file and its one older generation. What it must not do:
// format records (the slog handler does), or start goroutines.
package rotlog

import (
	"fmt"
	"os"
	"sync"
)

// Writer appends to a size-bounded log file. It is safe for concurrent use;
// each Write goes to one file whole.
type Writer struct {
	path  string
	limit int64

	mu   sync.Mutex
	f    *os.File // guarded by mu; nil after Close
	size int64    // guarded by mu: f's size
}

// Open opens (creating it, mode 0644) the log file at path, to be rotated
// when it would grow past limit bytes.
func Open(path string, limit int64) (*Writer, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("rotlog: limit %d", limit)
	}
	w := &Writer{path: path, limit: limit}
	if err := w.open(); err != nil {
		return nil, err
	}
	if w.size >= limit {
		if err := w.rotate(); err != nil {
			w.f.Close()
			return nil, err
		}
	}
	return w, nil
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("rotlog: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("rotlog: %w", err)
	}
	w.f, w.size = f, fi.Size()
	return nil
}

// rotate moves the current file to path.1 and opens a new one.
func (w *Writer) rotate() error {
	w.f.Close()
	w.f = nil
	if err := os.Rename(w.path, w.path+".1"); err != nil && !os.IsNotExist(err) {
		// Keep logging, bounded: start the file over.
		if terr := os.Truncate(w.path, 0); terr != nil {
			return fmt.Errorf("rotlog: rotate: %w; truncate: %w", err, terr)
		}
	}
	return w.open()
}

// Write appends p, rotating first if the file would pass its limit (a record
// longer than the limit goes alone into a fresh file).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return 0, os.ErrClosed
	}
	if w.size > 0 && w.size+int64(len(p)) > w.limit {
		if err := w.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	return n, err
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
