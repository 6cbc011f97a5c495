// Package tool holds what cmrt's example programs (Go counterparts of
// librdmacm's tools) share: getopt(3)-style option parsing, address
// resolution with getaddrinfo's error codes and texts, errno printing as
// perror(3) does, the fabric the programs run on, argv[0] and exit statuses
// as C shows them, and event status names.
//
// The programs run on the software fabric by default and on the kernel
// fabric when CMRT_FABRIC=kernel is set (see Fabric).
package tool

// Exit statuses. librdmacm's examples exit 1 (EXIT_FAILURE) on a usage
// error and where they call exit(1); where their main returns a status,
// they exit with its low 8 bits (ExitStatus). The cmrt programs do the
// same as their C counterparts.
const (
	ExitSuccess = 0
	ExitFailure = 1
)
