// Package format is the single source of number-format facts in lowbit: the
// element types a checkpoint can hold (BF16, F16, FP8 E4M3FN and E5M2, FP4
// E2M1, E8M0 and the plain integer and float types), their encodings to and
// from float32, and the block helpers the quantizers build on.
//
// Every conversion here is a readable scalar loop and is the reference that
// faster kernels are checked against. Rounding is round-to-nearest-even
// everywhere, as torch does; the package states for each format how it treats
// overflow, NaN and subnormals, and its tests pin every code of the 8- and
// 4-bit formats and agree with torch's own casts on a committed golden file.
//
// format knows nothing about files, tensor names or models, and imports only
// the standard library.
package format
