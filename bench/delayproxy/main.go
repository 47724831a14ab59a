// Command delayproxy forwards TCP connections from -listen to -target on
// 127.0.0.1 and holds every chunk -delay each way (internal/faultproxy's
// Delay): a one-way network delay for the benchmarks that mount through it
// (bench/coda.sh), on a machine with no netem. It runs until SIGINT or SIGTERM.
//
//	go run ./bench/delayproxy -listen 127.0.0.1:23200 -target 127.0.0.1:23049 -delay 1ms
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"snfs/internal/faultproxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	target := flag.String("target", "", "address to forward to (host:port)")
	delay := flag.Duration("delay", 0, "one-way delay added to each direction")
	flag.Parse()
	if err := run(*listen, *target, *delay); err != nil {
		fmt.Fprintln(os.Stderr, "delayproxy:", err)
		os.Exit(1)
	}
}

func run(listen, target string, delay time.Duration) error {
	if target == "" {
		return fmt.Errorf("-target is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	px, err := faultproxy.Listen(ctx, listen, target)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	defer px.Close()
	px.Delay(faultproxy.ClientToServer, delay)
	px.Delay(faultproxy.ServerToClient, delay)
	slog.Info("delayproxy", "listen", px.Addr(), "target", target, "delay", delay)
	<-ctx.Done()
	return nil
}
