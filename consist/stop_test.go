package consist

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"snfs/state"
)

// TestStopWhileReserving: OPENs that keep asking for blocks of versions
// while the driver stops start no goroutine after Stop's wait (each block is
// made durable in a goroutine of the driver's; one started after the wait
// wrote to closed records, a race CI's race detector caught in the tests of
// whole servers). Answers to OPENs racing Stop come, ErrGone or not.
func TestStopWhileReserving(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for round := 0; round < 20; round++ {
		d, err := New(Config{StateDir: diskDir(t), Grace: time.Second, Logger: quiet,
			Table: state.Config{VersionBlock: 1}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					fh := []byte(fmt.Sprintf("file-%d-%d", g, i))
					d.Open(1, fh, state.Write, 0, func(state.OpenReply, error) {})
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // OPENs after the stop
		close(stop)
		wg.Wait()
	}
}
