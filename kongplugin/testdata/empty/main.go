// Command empty is the baseline of the end-to-end measurement: a go-pdk plugin whose access
// handler makes no PDK call.
package main

import (
	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/server"
)

type Config struct{}

func New() any { return &Config{} }

func (c *Config) Access(*pdk.PDK) {}

func main() { server.StartServer(New, "0.0.0", 1) }
