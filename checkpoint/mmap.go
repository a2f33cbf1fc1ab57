package checkpoint

import (
	"fmt"
	"math"
	"os"

	mmap "github.com/edsrzf/mmap-go"
)

// File is a safetensors file mapped read-only into memory. Its tensors are
// views into the mapping, so looking one up copies nothing.
//
// A File is safe for concurrent Tensor lookups; Close must not race with them.
type File struct {
	path   string
	header *Header
	data   mmap.MMap // the whole file; nil once closed
}

// Tensor is a zero-copy view of one tensor's bytes in a mapped file.
//
// Data points into a read-only mapping: writing to it faults (the process
// dies), and it is valid only until the File or Model it came from is
// closed. Data is not necessarily aligned to the element size (the format
// does not require it); it is little-endian, as the format specifies.
type Tensor struct {
	Info TensorInfo
	Data []byte
}

// OpenFile validates the safetensors file at path and maps it read-only.
// Errors name the path; malformed files give errors wrapping ErrCorrupt.
// The file descriptor is closed before OpenFile returns: the mapping outlives
// it. Truncating the file on disk while it is mapped makes later reads of its
// data fault, as with any mapping.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	h, err := readHeaderFrom(f)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	size := h.DataStart + h.DataSize
	if size > math.MaxInt {
		return nil, fmt.Errorf("checkpoint: %s: %d bytes is too large to map on this platform", path, size)
	}
	m, err := mmap.MapRegion(f, int(size), mmap.RDONLY, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: mmap: %w", path, err)
	}
	if int64(len(m)) != size {
		_ = m.Unmap()
		return nil, fmt.Errorf("checkpoint: %s: mapped %d bytes, want %d", path, len(m), size)
	}
	return &File{path: path, header: h, data: m}, nil
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Header returns the file's validated header. It stays valid after Close.
func (f *File) Header() *Header { return f.header }

// Tensor returns a zero-copy view of the named tensor. A name the file does
// not hold gives an error wrapping ErrMissingTensor; a closed file, one
// wrapping ErrClosed.
func (f *File) Tensor(name string) (Tensor, error) {
	if f.data == nil {
		return Tensor{}, fmt.Errorf("checkpoint: %s: tensor %q: %w", f.path, name, ErrClosed)
	}
	info, ok := f.header.Lookup(name)
	if !ok {
		return Tensor{}, fmt.Errorf("checkpoint: %s: tensor %q: %w", f.path, name, ErrMissingTensor)
	}
	b, e := f.header.DataStart+info.Begin, f.header.DataStart+info.End
	return Tensor{Info: info, Data: f.data[b:e:e]}, nil
}

// Close unmaps the file. Every Tensor view obtained from it becomes invalid:
// reading one afterwards faults. Closing twice is a no-op.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	err := f.data.Unmap()
	f.data = nil
	if err != nil {
		return fmt.Errorf("checkpoint: %s: munmap: %w", f.path, err)
	}
	return nil
}
