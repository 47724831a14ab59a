package consist

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"snfs/state"
)

// TestOpenAfterStopAnswered: an OPEN that reaches a stopped driver and
// must wait (here for a block of versions, which nothing reserves once
// stopped) is answered, ErrGone, not parked for ever: its caller (a
// deferred NFS reply, a REINTEGRATE record) would wait for an answer no
// goroutine is left to give.
func TestOpenAfterStopAnswered(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := New(Config{StateDir: diskDir(t), Grace: time.Second, Logger: quiet,
		Table: state.Config{VersionBlock: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		got := make(chan error, 1)
		d.Open(1, []byte(fmt.Sprintf("file-%d", i)), state.Write, 0, func(_ state.OpenReply, err error) { got <- err })
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("OPEN %d after Stop never answered", i)
		}
	}
	got := make(chan error, 1)
	d.Access(2, []byte("file-0"), state.AccessRead, func(err error) { got <- err })
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("an access after Stop never answered")
	}
}
