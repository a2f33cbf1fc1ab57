package bench

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// phaseOf makes a phase result of requests given as (kind, TTFT seconds,
// output tokens), each with a 100-token prompt, over dur seconds.
func phaseOf(name string, load float64, dur float64, reqs ...any) PhaseResult {
	p := PhaseResult{PhaseInfo: PhaseInfo{Name: name, Group: "mixed", Load: load, LoadUnit: "users"}, Duration: dur}
	for i := 0; i < len(reqs); i += 3 {
		ttft, out := reqs[i+1].(float64), reqs[i+2].(int)
		p.Records = append(p.Records, Record{Kind: reqs[i].(string), User: i / 3, PromptLen: 100, Success: true,
			Start: 0.1 * float64(i/3), TTFT: ttft, ITL: []float64{0.01, 0.02}, Latency: ttft + 0.03, OutputTokens: out})
	}
	p.Recompute()
	return p
}

func resultOf(phases ...PhaseResult) *Result {
	return &Result{Format: ResultFormat, Spec: Spec{Name: "switchboard", Scale: 1, Seed: 1}, Phases: phases}
}

func TestCompareRules(t *testing.T) {
	base := resultOf(
		phaseOf("mixed@1", 1, 10, "agent", 1.0, 100, "agent", 1.0, 100, "chat", 0.5, 50, "chat", 0.5, 50),
		phaseOf("mixed@5", 5, 20, "agent", 1.0, 100, "agent", 1.0, 100, "chat", 0.5, 50, "chat", 0.5, 50))
	cand := resultOf(
		// Twice as fast, but agent TTFT p90 of 2 s against an allowance of
		// 1.5 × 1 s: factor 0.75.
		phaseOf("mixed@1", 1, 5, "agent", 2.0, 100, "agent", 2.0, 100, "chat", 0.5, 50, "chat", 0.7, 50),
		// Slower (0.8×), latency within the allowance.
		phaseOf("mixed@5", 5, 25, "agent", 1.4, 100, "agent", 1.5, 100, "chat", 0.6, 50, "chat", 0.75, 50))
	c, err := Compare(base, cand, "a.json", "b.json")
	if err != nil {
		t.Fatal(err)
	}
	p0, p1 := c.Phases[0], c.Phases[1]
	for _, ck := range []struct {
		name      string
		got, want float64
	}{
		{"phase 1 ratio", p0.OutputRatio, 2},
		{"phase 1 agent factor", p0.Kinds[0].Factor, 1.5 / 2},
		{"phase 1 chat factor", p0.Kinds[1].Factor, 1},
		{"phase 1 score", p0.Score, 1.5},
		{"phase 2 ratio", p1.OutputRatio, 0.8},
		{"phase 2 factor", p1.Factor, 1},
		{"Switchboard score", c.Switchboard.Score, math.Sqrt(1.5 * 0.8)},
		{"Switchboard unpenalized", c.Switchboard.Unpenalized, math.Sqrt(2 * 0.8)},
		{"LowBArena s", c.LowBArena.S, math.Sqrt(1.6)},
		{"LowBArena gate", c.LowBArena.GateValue, math.Sqrt(1.6) - 1.645*0.05/math.Sqrt(2)},
		{"LowBArena L", c.LowBArena.LengthChange, 0},
		{"LowBArena speed term", c.LowBArena.SpeedTerm, math.Sqrt(math.Sqrt(1.6))},
		// Same tokens in and out: total-token gains are duration ratios.
		{"FlagOS gain 1", c.FlagOS.Gains[0], 1},
		{"FlagOS gain 2", c.FlagOS.Gains[1], -0.2},
		{"FlagOS mean score", c.FlagOS.Mean, (70 - 14) / 2.0},
	} {
		if !near(ck.got, ck.want) {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	if !c.LowBArena.GatePass || !c.LowBArena.LengthPass {
		t.Errorf("gates %+v: want both passed", c.LowBArena)
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, c); err != nil || !strings.Contains(out.String(), "Switchboard: score 1.0954") {
		t.Errorf("report %q, %v", out.String(), err)
	}

	// A candidate generating 20% more tokens fails the length gate, and
	// its speed term is divided by 1.2; a slow one fails the speed gate;
	// one that completes nothing in a kind scores 0.
	longer := resultOf(
		phaseOf("mixed@1", 1, 10, "agent", 1.0, 120, "agent", 1.0, 120, "chat", 0.5, 60, "chat", 0.5, 60),
		phaseOf("mixed@5", 5, 40, "agent", 1.0, 120, "agent", 1.0, 120, "chat", 0.5, 60, "chat", 0.5, 60))
	c, _ = Compare(base, longer, "a", "b")
	s := math.Sqrt(1.2 * 0.6)
	if !near(c.LowBArena.LengthChange, 0.2) || c.LowBArena.LengthPass || c.LowBArena.GatePass || !near(c.LowBArena.SpeedTerm, math.Sqrt(s/1.2)) {
		t.Errorf("longer, slower candidate: %+v", c.LowBArena)
	}
	broken := resultOf(phaseOf("mixed@1", 1, 10, "agent", 1.0, 100, "agent", 1.0, 100, "chat", 0.5, 50, "chat", 0.5, 50), base.Phases[1])
	for i := 2; i < 4; i++ {
		broken.Phases[0].Records[i].Success = false
	}
	broken.Phases[0].Recompute()
	if c, _ := Compare(base, broken, "a", "b"); c.Phases[0].Score != 0 || c.Switchboard.Score != 0 {
		t.Errorf("a kind with nothing completed: phase score %v, total %v; want 0", c.Phases[0].Score, c.Switchboard.Score)
	}
}

func TestCompareRefusesDifferentRuns(t *testing.T) {
	a := resultOf(phaseOf("mixed@1", 1, 10, "agent", 1.0, 100))
	b := resultOf(phaseOf("mixed@1", 1, 10, "agent", 1.0, 100))
	b.Spec.Scale = 0.5
	if _, err := Compare(a, b, "a", "b"); err == nil || !strings.Contains(err.Error(), "--scale") {
		t.Errorf("different scales: %v", err)
	}
	b = resultOf(phaseOf("mixed@1", 1, 10, "agent", 1.0, 100))
	b.Phases[0].Records[0].PromptLen = 99
	if _, err := Compare(a, b, "a", "b"); err == nil || !strings.Contains(err.Error(), "different prompts") {
		t.Errorf("different prompts: %v", err)
	}
	if _, err := Compare(a, resultOf(), "a", "b"); err == nil {
		t.Error("different phase counts accepted")
	}
}

func TestResultFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := resultOf(phaseOf("mixed@1", 1, 10, "agent", 1.0, 100, "chat", 0.25, 7))
	path := filepath.Join(dir, "r.json")
	if err := WriteResult(path, r); err != nil {
		t.Fatal(err)
	}
	// Stored aggregates are not trusted: tampering with them changes
	// nothing once read back.
	data, _ := os.ReadFile(path)
	if !bytes.Contains(data, []byte(`"output_throughput": 10.7,`)) {
		t.Fatalf("results file lacks the phase's output throughput: %s", data)
	}
	data = bytes.Replace(data, []byte(`"output_throughput": 10.7,`), []byte(`"output_throughput": 999,`), 1)
	os.WriteFile(path, data, 0o644)
	back, err := ReadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Phases[0].Metrics.OutputThroughput; !near(got, 10.7) || len(back.Phases[0].Kinds) != 2 {
		t.Errorf("read back output throughput %v (want 10.7), %d kinds", got, len(back.Phases[0].Kinds))
	}
	for _, bad := range []struct{ data, want string }{
		{`{`, "not a lowbit bench results file"},
		{`{"format": 7}`, "format 7"},
		{`{"format": 1, "phases": []}`, "no phases"},
		{`{"format": 1, "phases": [{"name": "p", "duration": 0}]}`, "duration 0"},
		{`{"format": 1, "phases": [{"name": "p", "duration": 1, "records": [{"ttft": -1}]}]}`, "a time of -1"},
		{`{"format": 1, "phases": [{"name": "p", "duration": 1, "records": [{"latency": 1e300}]}]}`, "a time of 1e+300"},
	} {
		if _, err := ParseResult([]byte(bad.data)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseResult(%s) = %v, want %q", bad.data, err, bad.want)
		}
	}
}

func TestWritePlots(t *testing.T) {
	a := resultOf(phaseOf("mixed@1", 1, 10, "agent", 1.0, 100, "chat", 0.5, 50), phaseOf("mixed@5", 5, 12, "agent", 2.0, 100, "chat", 0.7, 50))
	b := resultOf(phaseOf("mixed@1", 1, 8, "agent", 0.8, 100, "chat", 0.4, 50), phaseOf("mixed@5", 5, 9, "agent", 1.5, 100, "chat", 0.6, 50))
	dir := filepath.Join(t.TempDir(), "plots")
	paths, err := WritePlots(dir, []Named{{"a", a}, {"b", b}})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("paths %v", paths)
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		// 8×5 inches at gonum's default 96 dpi.
		if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 480 {
			t.Errorf("%s is %v, want 768×480", p, b)
		}
	}
	empty := resultOf(phaseOf("x", 1, 1))
	if _, err := WritePlots(dir, []Named{{"e", empty}}); err == nil {
		t.Error("plotting a run without successes did not fail")
	}
}

func FuzzParseResult(f *testing.F) {
	r := resultOf(phaseOf("mixed@1", 1, 10, "agent", 1.0, 100, "chat", 0.25, 7))
	var buf bytes.Buffer
	data, _ := jsonMarshal(r)
	buf.Write(data)
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":1,"phases":[{"name":"p","duration":1,"records":[{"success":true,"itl":[1e308,1e308],"output_tokens":2}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseResult(data)
		if err != nil {
			return
		}
		for _, p := range r.Phases {
			m := p.Metrics
			if m.Completed+m.Failed != len(p.Records) || math.IsNaN(m.OutputThroughput) {
				t.Fatalf("metrics %+v of %d records", m, len(p.Records))
			}
		}
	})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
