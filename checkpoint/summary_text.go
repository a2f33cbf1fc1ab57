package checkpoint

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteText writes the summary for people: the architecture, the
// quantization, the files, totals per dtype and, when the summary has one,
// the tensor list.
func (s *Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("path\t%s", s.Path)
	if c := s.Config; c != nil {
		p("architecture\t%s (%s)", c.Arch, strings.Join(c.Architectures, ", "))
		layers := fmt.Sprintf("%d", c.Layers)
		if c.LinearAttnLayers > 0 {
			layers += fmt.Sprintf(" (%d Gated DeltaNet, %d full attention)", c.LinearAttnLayers, c.FullAttnLayers)
		}
		p("layers\t%s", layers)
		p("hidden\t%d", c.Hidden)
		p("attention\t%d heads, %d KV heads, head_dim %d, rotary %d, theta %g", c.Heads, c.KVHeads, c.HeadDim, c.RotaryDim, c.RopeTheta)
		if c.Experts > 0 {
			moe := fmt.Sprintf("%d experts, %d per token, width %d", c.Experts, c.ExpertsPerToken, c.MoEIntermediate)
			if c.SharedExpertInter > 0 {
				moe += fmt.Sprintf(", shared expert width %d", c.SharedExpertInter)
			}
			p("moe\t%s", moe)
		} else {
			p("mlp\twidth %d", c.Intermediate)
		}
		p("vocab\t%d (tied embeddings: %v)", c.Vocab, c.TiedEmbeddings)
		p("max positions\t%d", c.MaxPositions)
		p("kv cache\t%s per token in BF16", humanBytes(c.KVBytesPerToken))
	}
	switch {
	case s.Quant != nil:
		q := s.Quant
		line := fmt.Sprintf("%s, %s", q.Method, q.Scheme)
		if q.Format != "" {
			line += ", format " + q.Format
		}
		p("quantization\t%s; KV cache %s; %d modules ignored", line, q.KVCacheDType, len(q.Ignore))
	case s.Directory:
		p("quantization\tnone")
	}
	if len(s.ScaleTensors) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.ScaleTensors)) {
			parts = append(parts, fmt.Sprintf("%d %s", s.ScaleTensors[k], k))
		}
		p("scale tensors\t%s", strings.Join(parts, ", "))
	}
	var fileBytes int64
	for _, f := range s.Files {
		fileBytes += f.Bytes
	}
	p("files\t%d safetensors, %s", len(s.Files), humanBytes(fileBytes))
	p("tensors\t%d, %s elements, %s", s.Tensors, humanCount(s.Elements), humanBytes(s.Bytes))
	for _, d := range s.ByDType {
		p("  %s\t%d tensors, %s elements, %s", d.DType, d.Tensors, humanCount(d.Elements), humanBytes(d.Bytes))
	}
	for _, warn := range s.Warnings {
		p("warning\t%s", warn)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.TensorList) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tSHAPE\tBYTES\tFILE")
	for _, t := range s.TensorList {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\n", t.Name, t.DType, t.Shape, t.Bytes, t.File)
	}
	return tw.Flush()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprintf("%d", n)
}
