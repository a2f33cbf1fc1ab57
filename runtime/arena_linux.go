package runtime

import (
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of an x86-64 transparent huge page.
const hugePage = 2 << 20

// arena is anonymous memory holding the weights of a LoadOptions.NoMmap
// model.
type arena struct {
	mapping []byte // as mmap returned it, for munmap
	buf     []byte // the 2 MiB-aligned part in use
}

// newArena maps size bytes of anonymous memory, 2 MiB aligned and advised
// to use transparent huge pages before any page is touched (a huge page can
// only be allocated at the first fault of its whole 2 MiB range). With THP
// set to "never" the memory is plain 4 KiB pages.
func newArena(size int) (*arena, error) {
	n := (size + hugePage - 1) &^ (hugePage - 1)
	// mmap aligns to 4 KiB only: map one huge page more and start at the
	// first 2 MiB boundary (the unused head and tail are never touched, so
	// they cost address space, not memory).
	mem, err := unix.Mmap(-1, 0, n+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	off := int((base+hugePage-1)&^(hugePage-1) - base)
	a := &arena{mapping: mem, buf: mem[off : off+n : off+n]}
	_ = unix.Madvise(a.buf, unix.MADV_HUGEPAGE) // a hint: without it the copy still works
	return a, nil
}

func (a *arena) bytes() []byte { return a.buf }

// seal makes the arena read-only, as the mapping it replaces was: a stray
// write faults instead of changing the weights.
func (a *arena) seal() { _ = unix.Mprotect(a.buf, unix.PROT_READ) }

// free unmaps the arena; the weights' slices must not be used afterwards.
func (a *arena) free() error {
	if a == nil || a.mapping == nil {
		return nil
	}
	err := unix.Munmap(a.mapping)
	a.mapping, a.buf = nil, nil
	return err
}

// dropPageCache asks the kernel to drop a checkpoint file's clean pages
// from the page cache once the model holds its own copy (fadvise
// DONTNEED). Pages another process maps, or dirty ones, are kept by the
// kernel, so this cannot take data from anyone; a later reader reads from
// disk. A hint: errors are ignored.
func dropPageCache(dir, name string) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
