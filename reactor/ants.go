package reactor

import "github.com/panjf2000/ants/v2"

// ants creates a process-wide default pool when it is imported, with purge
// and ticktock goroutines that run forever. Reactors use private pools only,
// so release the default one: otherwise every program importing this
// package carries two idle goroutines (and goleak reports them).
func init() { ants.Release() }
