// CoreDNS for the test environment's real node, with only the plugins it uses (the upstream
// main links every plugin, cloud SDKs included). Setting dnsserver.Directives in a custom main
// is CoreDNS's documented way to choose plugins at compile time; the order follows upstream's
// plugin.cfg. There is deliberately no `forward`: names outside cluster.local never leave.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{
		"bind", "ready", "health", "errors", "log", "cache", "kubernetes",
	}
}

func main() {
	coremain.Run()
}
