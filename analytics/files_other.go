//go:build !unix

package analytics

// privateFiles does nothing where there is no umask: the database file
// takes the folder's permissions.
func privateFiles() (release func()) { return func() {} }
