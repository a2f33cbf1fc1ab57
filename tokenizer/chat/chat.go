// Package chat renders a model's Jinja chat template (tokenizer_config.json's
// chat_template) into the prompt text, byte for byte as transformers'
// apply_chat_template(..., tokenize=False) does.
//
// # Engine
//
// Templates run on github.com/ardanlabs/jinja (v1.8.0, the newest that
// builds with this module's Go), a pure-Go Jinja engine written for LLM chat
// templates: no dependencies, ordered dicts (so a tool schema's keys keep
// their order), jinja2's trim_blocks and lstrip_blocks behaviour (which
// transformers turns on), loop variables, namespace(), break/continue,
// macros, and the Python str and dict methods templates call (startswith,
// endswith, split, strip, lstrip, rstrip, get, items, ...). It renders
// Qwen3's template byte-identically except for tojson. The alternative
// tried, github.com/nikolalohinski/gonja/v2 (v2.9.1), failed more of
// testdata/features.jinja (str.lstrip() and str.split() without arguments,
// str.replace, dict filters, None printing), reads Go maps through
// reflection without key order, and brings a logger and a filesystem
// loader that {% include %} would reach.
//
// # What this package adds
//
// transformers compiles templates in jinja2's ImmutableSandboxedEnvironment
// with trim_blocks=True, lstrip_blocks=True, the loopcontrols extension and
// its own globals (chat_template_utils.py, _compile_jinja_template, read
// in transformers 5.17.0). To match it, Render supplies:
//
//   - tojson with transformers' semantics: json.dumps(x, ensure_ascii=False,
//     indent=None, separators=None, sort_keys=False), Python's float repr
//     and all. The engine's own tojson cannot be replaced by a variable, so
//     Compile renames the filter in the template text (rewrite.go).
//   - raise_exception(msg), failing the render with a *TemplateError that
//     carries msg; strftime_now(format) on the local clock.
//   - range() as the sandbox has it, refusing more than 100000 elements,
//     plus a budget of 10^6 range elements per render.
//   - The variables transformers passes: messages, tools (None when absent),
//     documents (None), add_generation_prompt, bos_token and eos_token
//     (only when set: transformers 5 passes special_tokens_map, which omits
//     unset tokens), then Kwargs on top.
//   - Its refusal of an empty conversation, and JSON values converted with
//     Python's distinctions (values.go).
//
// # Known differences from jinja2
//
// The engine, not this package, decides these; testdata/features.jinja
// avoids them so that its golden render pins down the rest:
//
//   - Undefined: an undefined variable prints as "", is falsy, iterates as
//     empty and has length 0, as jinja2's default Undefined; but where
//     jinja2 raises UndefinedError (an attribute of an undefined value,
//     concatenating one), the engine yields "" and renders on.
//   - None prints as "" (jinja2: "None"); floats print with Go's %g
//     (jinja2: Python's repr, "1.0"); // and % truncate toward zero.
//   - Scientific float literals (1e5), "x is in y", "x is eq y" and
//     str.split's maxsplit are not understood.
//   - Tuples print as lists ([['a', 1]], jinja2: [('a', 1)]); select and
//     reject without a test name fail; "}}" inside an expression (a dict
//     literal ending in {}}) closes the tag, where jinja2 balances braces.
//   - When two block tags touch ({% endif %}{% endfor %}), each applies
//     trim_blocks to the text after the second, so a blank line there is
//     lost; jinja2 trims only text that follows a tag directly.
//   - The sandbox's attribute and mutation checks do not exist (list.append
//     works); {% filter tojson %} blocks use the engine's tojson.
//   - The engine has no step, depth or memory limit: a recursive macro with
//     no base case or a string doubled in a loop runs until the process
//     dies. Templates ship with the model and are trusted as code is;
//     messages are not, and nothing in them can do this.
package chat

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ardanlabs/jinja"
)

// Input is what a template sees. Messages and Tools are JSON-shaped values
// (maps, slices, strings, numbers, bools, nil) as decoded from an OpenAI
// request, with message content already a string. A json.RawMessage
// anywhere in them is decoded with its key order and its int/float
// spelling kept, as Python's json.loads keeps them; pass tools that way so
// that tojson prints each schema as the client wrote it (a map[string]any
// has no order, so its keys come out sorted).
type Input struct {
	Messages            []map[string]any
	Tools               []any
	AddGenerationPrompt bool
	// Kwargs are extra template variables (chat_template_kwargs, e.g.
	// enable_thinking). They override bos_token and eos_token, as
	// transformers' do; other special tokens (pad_token, ...) go here.
	Kwargs map[string]any
	// BOSToken and EOSToken are the special token strings ("" when unset).
	BOSToken, EOSToken string
}

// Template is a compiled chat template, safe for concurrent use.
type Template struct {
	t *jinja.Template
}

// Compile parses a chat template.
func Compile(template string) (*Template, error) {
	t, err := jinja.Compile(renameFilters(template))
	if err != nil {
		return nil, fmt.Errorf("chat: template syntax: %w", err)
	}
	return &Template{t: t}, nil
}

// reserved are the variables transformers passes by name; a kwarg with one
// of these names makes its render call fail ("got multiple values").
var reserved = []string{"messages", "tools", "documents", "add_generation_prompt"}

// Render renders the template with in.
func (t *Template) Render(in Input) (out string, err error) {
	if len(in.Messages) == 0 {
		// apply_chat_template refuses before rendering.
		return "", errors.New("chat: cannot apply chat template to an empty conversation")
	}
	data := map[string]jinja.Value{
		"add_generation_prompt": jinja.NewBool(in.AddGenerationPrompt),
		"documents":             jinja.None(),
		"raise_exception":       jinja.NewCallable("raise_exception", raiseException),
		"strftime_now":          jinja.NewCallable("strftime_now", strftimeNow),
		"range":                 jinja.NewCallable("range", newRange()),
	}
	for name, private := range overriddenFilters {
		data[private] = jinja.NewCallable(name, filterImpls[name])
	}
	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		if msgs[i], err = toValue(m); err != nil {
			return "", fmt.Errorf("chat: messages[%d]: %w", i, err)
		}
	}
	data["messages"] = jinja.NewList(msgs)
	data["tools"] = jinja.None()
	if in.Tools != nil {
		if data["tools"], err = toValue(in.Tools); err != nil {
			return "", fmt.Errorf("chat: tools: %w", err)
		}
	}
	if in.BOSToken != "" {
		data["bos_token"] = jinja.NewString(in.BOSToken)
	}
	if in.EOSToken != "" {
		data["eos_token"] = jinja.NewString(in.EOSToken)
	}
	for k, v := range in.Kwargs {
		for _, r := range reserved {
			if k == r {
				return "", fmt.Errorf("chat: kwarg %q would replace a variable transformers sets itself", k)
			}
		}
		if data[k], err = toValue(v); err != nil {
			return "", fmt.Errorf("chat: kwargs[%q]: %w", k, err)
		}
	}
	// The engine panics on some malformed uses (e.g. a filter given too
	// few arguments); a template error must not take the server down.
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat: template execution failed: %v", r)
		}
	}()
	out, err = t.t.RenderValues(data)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("chat: render: %w", err)
	}
	return out, nil
}

// cache keeps compiled templates by source: a server renders the same one
// or two templates for every request, and compiling costs more than
// rendering.
var cache struct {
	sync.Mutex
	m map[string]*Template
}

// maxCached bounds the cache; past it the cache starts over.
const maxCached = 16

// Render renders template with in, compiling it on first use.
func Render(template string, in Input) (string, error) {
	cache.Lock()
	t := cache.m[template]
	cache.Unlock()
	if t == nil {
		var err error
		if t, err = Compile(template); err != nil {
			return "", err
		}
		cache.Lock()
		if cache.m == nil || len(cache.m) >= maxCached {
			cache.m = map[string]*Template{}
		}
		cache.m[template] = t
		cache.Unlock()
	}
	return t.Render(in)
}
