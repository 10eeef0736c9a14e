// The test environment's pod sandbox ("pause") program: holds a pod's namespaces open until it
// is told to stop. Built statically by testenv/build.py into the pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As PID 1 of a shared PID namespace it must reap orphans: ignoring SIGCHLD lets the
	// kernel do that.
	signal.Ignore(syscall.SIGCHLD)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
