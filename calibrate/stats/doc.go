// Package stats defines the calibration statistics file that calibrate writes
// and quantize reads. It is a cgo-free leaf, so that quantize never imports the
// runtime.
package stats
