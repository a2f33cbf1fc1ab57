package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func user(content string) []map[string]any {
	return []map[string]any{{"role": "user", "content": content}}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, tmpl string
		in         Input
		want       string // substring of the error
	}{
		{"syntax: unclosed tag", "{{ messages[0].content ", Input{Messages: user("x")}, "template syntax"},
		{"syntax: unclosed block", "{% if true %}x", Input{Messages: user("x")}, "template syntax"},
		{"empty conversation", "{{ messages }}", Input{}, "empty conversation"},
		{"reserved kwarg", "x", Input{Messages: user("x"), Kwargs: map[string]any{"messages": 1}}, `kwarg "messages"`},
		{"not JSON-shaped", "x", Input{Messages: []map[string]any{{"c": make(chan int)}}}, "not JSON-shaped"},
		{"bad raw JSON", "x", Input{Messages: user("x"), Tools: []any{json.RawMessage(`{"a":`)}}, "tools"},
		{"tojson of undefined", "{{ nothing | tojson }}", Input{Messages: user("x")}, "not JSON serializable"},
		{"tojson bad kwarg", "{{ 1 | tojson(bogus=1) }}", Input{Messages: user("x")}, "unexpected keyword"},
		{"range beyond the sandbox", "{% for i in range(100001) %}{% endfor %}", Input{Messages: user("x")}, "MAX_RANGE (100000)"},
		{"range budget", "{% for i in range(100) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", Input{Messages: user("x")}, "exceed"},
		{"range step 0", "{{ range(1, 2, 0) }}", Input{Messages: user("x")}, "must not be zero"},
		// The engine panics here (select without a test); Render must not.
		{"engine panic", "{{ [0, 1] | select | list }}", Input{Messages: user("x")}, "execution failed"},
		{"attribute of None", "{{ messages[0].content.strip() }}", Input{Messages: []map[string]any{{"content": nil}}}, "not callable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Render(tc.tmpl, tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render = %q, %v; want an error containing %q", got, err, tc.want)
			}
		})
	}
}

func TestRaiseException(t *testing.T) {
	tmpl := "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}" +
		"{{ raise_exception('Unsupported role: ' ~ m.role) }}{% endif %}{% endfor %}ok"
	if got, err := Render(tmpl, Input{Messages: user("hi")}); err != nil || got != "ok" {
		t.Fatalf("Render = %q, %v", got, err)
	}
	_, err := Render(tmpl, Input{Messages: []map[string]any{{"role": "critic", "content": "x"}}})
	var te *TemplateError
	if !errors.As(err, &te) || te.Message != "Unsupported role: critic" {
		t.Fatalf("err = %v; want a *TemplateError with the template's message", err)
	}
	if !strings.Contains(err.Error(), "Unsupported role: critic") {
		t.Fatalf("err.Error() = %q lacks the message", err.Error())
	}
}

// TestUndefined pins what an undefined variable does, as jinja2's default
// Undefined does in transformers (the golden features case covers the
// same inside a real render).
func TestUndefined(t *testing.T) {
	in := Input{Messages: user("hi")}
	for _, tc := range []struct{ tmpl, want string }{
		{"[{{ nothing }}]", "[]"},
		{"{{ nothing is defined }} {{ nothing is undefined }}", "False True"},
		{"{% if nothing %}yes{% else %}no{% endif %}", "no"},
		{"{{ nothing | default('d') }}", "d"},
		{"{{ nothing | length }}", "0"},
		{"{% for x in nothing %}x{% else %}empty{% endfor %}", "empty"},
		{"{{ messages[0].missing is defined }}[{{ messages[0].missing }}]", "False[]"},
		{"{{ messages[5] is defined }}", "False"},
		{"{{ enable_thinking is defined and enable_thinking is false }}", "False"},
		{"{{ bos_token is defined }} {{ tools is none }} {{ documents is none }}", "False True True"},
	} {
		got, err := Render(tc.tmpl, in)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.tmpl, got, err, tc.want)
		}
	}
}

func TestVariables(t *testing.T) {
	in := Input{
		Messages: user("hi"), BOSToken: "<s>", EOSToken: "</s>", AddGenerationPrompt: true,
		Kwargs: map[string]any{"eos_token": "<override>", "enable_thinking": false},
	}
	got, err := Render("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ enable_thinking is false }}", in)
	if want := "<s>|<override>|True|True"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

func TestToJSON(t *testing.T) {
	in := Input{Messages: user("x"), Kwargs: map[string]any{
		"v": json.RawMessage(`{"z": 1, "f": 1.0, "big": 1e16, "e": 1.5e-7, "s": "é\u2028\"\\<&>\u0001\u007f🙂", "n": null, "l": [true, {}, []]}`),
	}}
	for _, tc := range []struct{ tmpl, want string }{
		{"{{ v | tojson }}", `{"z": 1, "f": 1.0, "big": 1e+16, "e": 1.5e-07, "s": "é` + "\u2028" + `\"\\<&>\u0001` + "\x7f" + `🙂", "n": null, "l": [true, {}, []]}`},
		{"{{ v.s | tojson(ensure_ascii=true) }}", `"\u00e9\u2028\"\\<&>\u0001\u007f\ud83d\ude42"`},
		{"{{ v.l | tojson(indent=2) }}", "[\n  true,\n  {},\n  []\n]"},
		{"{{ {'b': [1], 'a': 2} | tojson(indent='\t', sort_keys=true) }}", "{\n\t\"a\": 2,\n\t\"b\": [\n\t\t1\n\t]\n}"},
		{"{{ v.l | tojson(separators=(',', ':')) }}", "[true,{},[]]"},
		{"{{ 0.1 + 0.2 }} {{ [0.5, 100000000000000000000.0, 0.00001, 123456789.0] | tojson }}", "0.30000000000000004 [0.5, 1e+20, 1e-05, 123456789.0]"},
		{`{{ "| tojson" }}{% raw %}{{ x | tojson }}{% endraw %}`, "| tojson{{ x | tojson }}"},
	} {
		got, err := Render(tc.tmpl, in)
		if err != nil || got != tc.want {
			t.Errorf("%s:\n got %q, %v\nwant %q", tc.tmpl, got, err, tc.want)
		}
	}
}

func TestRenameFilters(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"{{ x|tojson }}", "{{ x|__lowbit_tojson }}"},
		{"{%- set y = x | tojson(indent=2) -%}", "{%- set y = x | __lowbit_tojson(indent=2) -%}"},
		{"{{ '|tojson' ~ \"| tojson\" }}", "{{ '|tojson' ~ \"| tojson\" }}"},
		{"{# x | tojson #}text | tojson", "{# x | tojson #}text | tojson"},
		{"{{ x | tojsonish }}", "{{ x | tojsonish }}"},
		{"{% raw %}{{ a | tojson }}{% endraw %}{{ b | tojson }}", "{% raw %}{{ a | tojson }}{% endraw %}{{ b | __lowbit_tojson }}"},
		{"{{ x | tojson", "{{ x | tojson"},
	} {
		if got := renameFilters(tc.src); got != tc.want {
			t.Errorf("renameFilters(%q) = %q; want %q", tc.src, got, tc.want)
		}
	}
}

func TestValues(t *testing.T) {
	in := Input{Messages: user("x"), Kwargs: map[string]any{
		"f64int": 3.0, "f64": 2.5, "num": json.Number("4.0"), "numint": json.Number("4"),
		"u": uint8(7), "ms": []map[string]any{{"b": 1, "a": 2}},
	}}
	got, err := Render("{{ [f64int, f64, num, numint, u] | tojson }} {{ ms | tojson }}", in)
	if want := `[3, 2.5, 4.0, 4, 7] [{"a": 2, "b": 1}]`; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

func TestStrftimeNow(t *testing.T) {
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return time.Date(2024, 7, 6, 9, 5, 3, 0, time.UTC) }
	got, err := Render(`{{ strftime_now("%d %b %Y") }}|{{ strftime_now("%A %B %e %H:%M:%S %I%p %j %y %%") }}`, Input{Messages: user("x")})
	if want := "06 Jul 2024|Saturday July  6 09:05:03 09AM 188 24 %"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

func TestCompileOnce(t *testing.T) {
	tmpl, err := Compile("{% for m in messages %}{{ m.content }}{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if got, err := tmpl.Render(Input{Messages: user(s)}); err != nil || got != s {
			t.Fatalf("got %q, %v", got, err)
		}
	}
}
