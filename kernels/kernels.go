package kernels

import "errors"

// ErrNoCgo is returned by every kernel entry point of a binary built with
// CGO_ENABLED=0: such a binary can read, write and quantize checkpoints, but
// cannot run models.
var ErrNoCgo = errors.New("kernels: this lowbit binary was built without cgo (CGO_ENABLED=0) and cannot run models; rebuild with CGO_ENABLED=1 and a C compiler")
