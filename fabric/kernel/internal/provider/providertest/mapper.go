// Package providertest helps test providers without a device: a Mapper
// whose "kernel" side is anonymous memory the test writes as a driver
// would.
package providertest

import (
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mapper implements provider.Mapper over regions the test adds. Mmap
// returns the region registered at the key (the same memory the test
// sees, as a driver's pages are shared); Munmap records the release.
type Mapper struct {
	mu      sync.Mutex
	regions map[uint64][]byte
	mapped  map[*byte]bool
	// FailMmap makes Mmap fail with this error when set.
	FailMmap error
}

// NewMapper returns an empty Mapper.
func NewMapper() *Mapper {
	return &Mapper{regions: make(map[uint64][]byte), mapped: make(map[*byte]bool)}
}

// Add allocates size bytes (page-aligned, zeroed) at key and returns them.
func (m *Mapper) Add(key uint64, size int) []byte {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	m.mu.Lock()
	m.regions[key] = mem
	m.mu.Unlock()
	return mem
}

// Mmap implements provider.Mapper.
func (m *Mapper) Mmap(key uint64, length int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.FailMmap != nil {
		return nil, m.FailMmap
	}
	mem, ok := m.regions[key]
	if !ok || length > len(mem) {
		return nil, fmt.Errorf("providertest: no region of %d bytes at %#x: %w", length, key, syscall.EINVAL)
	}
	mem = mem[:length:length]
	m.mapped[&mem[0]] = true
	return mem, nil
}

// Munmap implements provider.Mapper.
func (m *Mapper) Munmap(b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(b) == 0 || !m.mapped[&b[0]] {
		return fmt.Errorf("providertest: unmapping memory not mapped: %w", syscall.EINVAL)
	}
	delete(m.mapped, &b[0])
	return nil
}

// Mapped returns how many mappings are live.
func (m *Mapper) Mapped() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mapped)
}

// Release frees every region.
func (m *Mapper) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, mem := range m.regions {
		_ = unix.Munmap(mem)
		delete(m.regions, k)
	}
}
