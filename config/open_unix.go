//go:build unix

package config

import "syscall"

// openNonBlock opens a FIFO without waiting for a writer; it changes nothing for a regular file.
const openNonBlock = syscall.O_NONBLOCK
