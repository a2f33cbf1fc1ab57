package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed cu/*.cu cu/*.cuh
var sources embed.FS

// Source returns the kernel program NVRTC compiles: cu/common.cuh, then
// every cu/*.cu in name order.
func Source() (string, error) {
	var b strings.Builder
	common, err := sources.ReadFile("cu/common.cuh")
	if err != nil {
		return "", err
	}
	b.Write(common)
	names, err := fs.Glob(sources, "cu/*.cu")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		src, err := sources.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n// ---- %s\n", n)
		b.Write(src)
	}
	return b.String(), nil
}
