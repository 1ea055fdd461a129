//go:build !(linux && amd64 && cgo)

package duckalloc

import "time"

func supported() bool { return false }

func getMillis(string) (time.Duration, error) { return 0, errUnsupported }

func setMillis(string, time.Duration) error { return errUnsupported }

func arenaCount() (int, error) { return 0, errUnsupported }

func hugePagesOnArena(int) error { return errUnsupported }

func arenaHasHugePages(int) (bool, error) { return false, errUnsupported }

func freeNeighboursOnNewThread(int) error { return errUnsupported }

func setForeignHooks(int, bool) error { return errUnsupported }
