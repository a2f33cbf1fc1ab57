// Package modelconfigs embeds the published config.json files of the models
// lowbit targets (see PROVENANCE.md), so that synthetic checkpoints carry the
// real field names and true shapes, and config parsing is tested on the real
// files.
package modelconfigs

import (
	"embed"
	"fmt"
	"slices"
	"strings"
)

//go:embed *.json
var files embed.FS

// Names lists the embedded configs by model name ("qwen3-8b", ...), sorted.
func Names() []string {
	entries, _ := files.ReadDir(".") // the embedded FS cannot fail to list
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	slices.Sort(names)
	return names
}

// Get returns the config.json of the named model, as published.
func Get(name string) ([]byte, error) {
	b, err := files.ReadFile(name + ".json")
	if err != nil {
		return nil, fmt.Errorf("modelconfigs: no config for %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}
