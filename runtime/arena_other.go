//go:build !linux

package runtime

// arena holds the weights of a LoadOptions.NoMmap model. Without Linux's
// madvise there are no huge pages to ask for: the copy lives on the Go
// heap, which still frees the checkpoint's mapping.
type arena struct{ buf []byte }

func newArena(size int) (*arena, error) { return &arena{buf: make([]byte, size)}, nil }

func (a *arena) bytes() []byte { return a.buf }

func (a *arena) seal() {}

func (a *arena) free() error {
	if a != nil {
		a.buf = nil
	}
	return nil
}

func dropPageCache(dir, name string) {}
