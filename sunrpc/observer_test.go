package sunrpc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

type recObserver struct {
	mu    sync.Mutex
	calls []string
}

func (o *recObserver) ObserveCall(program string, vers uint32, proc string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s/%d/%s", program, vers, proc))
}

// TestClientObserver: every call that got a reply (an RPC-level error
// included) is observed once, named by the CallNames; a view made with
// Program shares the observer.
func TestClientObserver(t *testing.T) {
	_, addr, _ := testServer(t)
	ctx := context.Background()
	var o recObserver
	names := func(prog, vers, proc uint32) (string, string) {
		return fmt.Sprintf("p%x", prog), fmt.Sprintf("P%d", proc)
	}
	c := dial(t, "tcp", addr, 3, WithObserver(&o, names))
	var res u32res
	if err := c.Call(ctx, 1, u32(0), &res); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, 9, nil, nil); err == nil {
		t.Fatal("proc 9: want PROC_UNAVAIL")
	}
	if err := c.Program(testProg, 2).Call(ctx, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"p20000099/3/P1", "p20000099/3/P9", "p20000099/2/P0"}
	o.mu.Lock()
	got := fmt.Sprint(o.calls)
	o.mu.Unlock()
	if got != fmt.Sprint(want) {
		t.Errorf("observed %s, want %s", got, want)
	}

	// Without names: the numbers.
	var o2 recObserver
	c2 := dial(t, "tcp", addr, 3, WithObserver(&o2, nil))
	if err := c2.Call(ctx, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(o2.calls); got != fmt.Sprintf("[%d/3/0]", testProg) {
		t.Errorf("observed %s without names", got)
	}
}
