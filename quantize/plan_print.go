package quantize

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText prints the plan for --dry-run: one line per source tensor or
// module (what happens to it, and its bytes before and after), then the
// totals, the modules left in BF16 and the notes.
func (p *Plan) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TENSOR\tACTION\tOUTPUTS\tBYTES IN\tBYTES OUT\t")
	for i := 0; i < len(p.Actions); {
		a := p.Actions[i]
		// A quantized module's outputs share a name prefix and follow each
		// other; a constant has no source.
		j, out := i+1, a.Output
		bytesOut := out.Bytes()
		in := a.InBytes
		for j < len(p.Actions) && a.How != "copy" && a.How != "split" && a.How != "kv-scale" && p.Actions[j].InBytes == 0 && p.Actions[j].How == a.How {
			o := p.Actions[j].Output
			bytesOut += o.Bytes()
			j++
		}
		name := out.Name
		if j-i > 1 {
			name = moduleOf(out.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t\n", name, a.How, j-i, in, bytesOut)
		i = j
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s, %s format, KV cache %s: %d modules quantized, %d linear modules kept in BF16\n",
		p.Opts.Scheme, p.Opts.Format, map[bool]string{true: "fp8", false: "auto"}[p.Opts.KVCacheFP8], len(p.Quantized), len(p.Ignore))
	fmt.Fprintf(w, "%d output tensors; %.3f GB read -> %.3f GB written (%.1f%%)\n",
		len(p.Outputs), float64(p.BytesIn)/1e9, float64(p.BytesOut)/1e9, 100*float64(p.BytesOut)/float64(max(p.BytesIn, 1)))
	if len(p.Ignore) > 0 {
		fmt.Fprintf(w, "kept in BF16: %s\n", summarizeNames(p.Ignore, 12))
	}
	for _, n := range p.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

func moduleOf(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return name[:i]
		}
	}
	return name
}

func summarizeNames(names []string, n int) string {
	if len(names) <= n {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v ... and %d more", names[:n], len(names)-n)
}
