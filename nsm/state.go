package nsm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The host's own state number (XNFS chapter 11, "Network Status Monitor
// Protocol": odd while the host is up, even while it is down, increased at
// each change). A monitor keeps it on disk and advances it when its host
// starts; the new number goes in the SM_NOTIFY calls that tell the peers, and
// in every sm_stat and sm_stat_res it answers.
//
// The file holds the number in decimal and a newline. Like nfs-utils'
// rpc.statd (support/nsm/file.c, nsm_get_state), a start makes an even
// number odd and then adds two, so a peer never gets the same number from two
// incarnations in a row; past 2^31-1 it wraps to 1. A missing file is a first
// start from state 1, so the first number used is 3, as rpc.statd's ("Local
// NSM state number: 3" from a fresh rpc.statd in the Linux guest).

// ErrBadState reports a state file whose content is not a state number.
var ErrBadState = errors.New("nsm: state file holds no state number")

// ReadState returns the state number kept in the file at path, as the last
// NextState left it, without changing it.
func ReadState(path string) (int32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("nsm: state number: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSuffix(string(b), "\n"), 10, 32)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: %s: %q", ErrBadState, path, b)
	}
	return int32(v), nil
}

// NextState advances the state number kept in the file at path for a start
// of this host and returns it: the number in the file made odd, plus two (3
// becomes 5, 4 becomes 7), or 3 when there is no file. The new number is on
// disk when NextState returns (written to a temporary file, synced, renamed
// over path, and the directory synced), so a crash right after cannot bring
// an old number back.
// A file that holds no state number is an error, and is left as it is:
// something other than NextState wrote it, and an operator should look.
func NextState(path string) (int32, error) {
	prev, err := ReadState(path)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist):
		prev = 1
	default:
		return 0, err
	}
	next := int64(prev) | 1 // an even number: the host went down
	next += 2
	if next > math.MaxInt32 {
		next = 1
	}
	if err := writeDurable(path, []byte(strconv.FormatInt(next, 10)+"\n")); err != nil {
		return 0, fmt.Errorf("nsm: state number: %w", err)
	}
	return int32(next), nil
}

// writeDurable replaces path with data atomically and durably (as
// store.WriteFileDurable, which a wire-format package does not import).
func writeDurable(path string, data []byte) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
