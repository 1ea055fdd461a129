//go:build !linux

package threadprio

import "errors"

// Favor does nothing where threads' priorities are not set here.
func Favor(by int) (release func()) { return func() {} }

// Niceness is not read where threads' priorities are not set here.
func Niceness(pid int) (map[int]int, error) {
	return nil, errors.New("threads' niceness is read on Linux only")
}
