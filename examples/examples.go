// Package examples holds the example configs that programs embed as their defaults.
package examples

import _ "embed"

// DianaYAML is diana.yaml, dianad's demo config (local mode, the built-in demo upstream): the
// config dianad runs when it is given no --config.
//
//go:embed diana.yaml
var DianaYAML string
