#!/usr/bin/env python3
"""Golden chat-template renders for tokenizer/chat, made by transformers.

Each case's inputs go through transformers' own
tokenizer.apply_chat_template(..., tokenize=False) with the Qwen3 tokenizer
built from this repo's files (internal/qwen3tok), so the expected strings
come from the reference implementation, not from us. The Go tests
(tokenizer/chat/golden_test.go) render the same inputs and compare bytes.

Regenerate (needs transformers 5.x, no network; the device machine has it):

    python3 scripts/golden_chat.py --out tokenizer/chat/testdata/golden.json

as it was run on the device machine:

    python3 scripts/golden_chat.py --out $OUT/golden.json --source-out $OUT/chat_template_utils.py

--source-out saves transformers' chat_template_utils.py, to check which
Jinja environment and tojson the renders came from.
"""

import argparse
import gzip
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN3TOK = os.path.join(ROOT, "internal", "qwen3tok")
TESTDATA = os.path.join(ROOT, "tokenizer", "chat", "testdata")

# Templates by name: "qwen3" is tokenizer_config.json's own; the others are
# files in TESTDATA (see its README for where they came from).
TEMPLATE_FILES = {
    "qwen3-2507": "qwen3-4b-instruct-2507.jinja",
    "features": "features.jinja",
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Say \"where\" & <how>: 東京 🙂\u2028ok",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 1},
                "threshold": {"type": "number", "default": 1.0, "multipleOf": 0.5, "big": 1e21, "small": 1.5e-7},
                "flags": {"type": "array", "items": {"type": "boolean"}, "default": [True, False, None]},
            },
            "required": ["location"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\nReturns a list of results.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
            "required": ["query"],
        },
    },
}

THINK_HISTORY = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n2+2 is 4."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "<think>\n\nAgain easy.\n\n</think>\n\n\n3+3 is 6."},
    {"role": "user", "content": "Thanks! Now 10*10?"},
]

TOOL_FLOW = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in 東京 and Paris?"},
    {
        "role": "assistant",
        "content": "<think>\nTwo cities, two calls.\n</think>\n\nLet me check.",
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"location": "東京", "unit": "celsius", "days": 2}}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5, \"sky\": \"晴れ\"}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "Sunny, 18°C"},
]

UNICODE = [
    {"role": "system", "content": "Réponds en français. 用中文也可以。"},
    {"role": "user", "content": "Emoji 🙂👍🏽 and CJK 東京/서울; quotes \"double\" 'single' `back`;\nnew\nlines\\ and a tab\t<|im_start|>"},
    {"role": "assistant", "content": "D'accord — «guillemets» \"ok\"\n\n✓"},
    {"role": "user", "content": "  leading and trailing spaces  \n"},
]

CASES = [
    {"name": "single_user", "messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": True},
    {"name": "system_user", "messages": [{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": "Hi."}], "add_generation_prompt": True},
    {"name": "think_history", "messages": THINK_HISTORY, "add_generation_prompt": True},
    {"name": "think_history_no_gen", "messages": THINK_HISTORY[:5], "add_generation_prompt": False},
    {"name": "enable_thinking_true", "messages": THINK_HISTORY, "add_generation_prompt": True,
     "kwargs": {"enable_thinking": True}},
    {"name": "enable_thinking_false", "messages": THINK_HISTORY, "add_generation_prompt": True,
     "kwargs": {"enable_thinking": False}},
    {"name": "enable_thinking_unset", "messages": [{"role": "user", "content": "Think?"}], "add_generation_prompt": True},
    {"name": "tools_only", "messages": [{"role": "user", "content": "Find cats."}],
     "tools": [WEATHER_TOOL, SEARCH_TOOL], "add_generation_prompt": True},
    {"name": "tools_with_system", "messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Weather?"}],
     "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    {"name": "tool_flow", "messages": TOOL_FLOW, "tools": [WEATHER_TOOL, SEARCH_TOOL], "add_generation_prompt": True},
    {"name": "tool_flow_answered", "tools": [WEATHER_TOOL], "add_generation_prompt": False, "messages": TOOL_FLOW + [
        {"role": "assistant", "content": "<think>\nBoth answered.\n</think>\n\nTokyo 21.5°C, Paris sunny."}]},
    {"name": "tool_flow_next_question", "tools": [WEATHER_TOOL], "add_generation_prompt": True, "messages": TOOL_FLOW + [
        {"role": "assistant", "content": "Tokyo 21.5°C, Paris sunny."},
        {"role": "user", "content": "And Rome?"}]},
    {"name": "tool_response_as_user", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "x", "top_k": 3}}}]},
        {"role": "user", "content": "<tool_response>\nresult\n</tool_response>"}]},
    {"name": "unicode_quotes_newlines", "messages": UNICODE, "add_generation_prompt": True},
    {"name": "no_generation_prompt", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}]},
    {"name": "reasoning_content", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "R1 (dropped: before the last query)"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "\n\nA2", "reasoning_content": "\nR2 kept\n"}]},
    {"name": "reasoning_content_none", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>parsed</think>A1", "reasoning_content": None},
        {"role": "assistant", "content": "plain", "reasoning_content": ""}]},
    {"name": "system_later", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "first"}, {"role": "system", "content": "late system"},
        {"role": "user", "content": "second"}]},
    {"name": "content_list", "add_generation_prompt": True, "templates": ["qwen3-2507"], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "list content"}]}]},
    {"name": "extra_fields", "add_generation_prompt": True, "templates": ["features"],
     "kwargs": {"extra": {"i": 3, "f": 2.5, "whole": 4.0, "b": False, "n": None, "s": "x\"y", "l": [1, "two"]}},
     "tools": [SEARCH_TOOL],
     "messages": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "u1"},
                  {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]},
    {"name": "features_no_tools", "add_generation_prompt": False, "templates": ["features"],
     "messages": [{"role": "user", "content": "only"}]},
    # Inputs on which transformers raises: the Go side must fail too.
    {"name": "err_empty_messages", "messages": [], "add_generation_prompt": True, "templates": ["qwen3"]},
    {"name": "err_content_none", "add_generation_prompt": True, "templates": ["qwen3"], "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": None}]},
    {"name": "content_none_2507", "add_generation_prompt": True, "templates": ["qwen3-2507"], "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "y"}}}]}]},
    {"name": "err_raise_exception", "templates": ["features"], "add_generation_prompt": False,
     "kwargs": {"fail": "no user turn"}, "messages": [{"role": "user", "content": "x"}]},
]

DEFAULT_TEMPLATES = ["qwen3", "qwen3-2507"]


def build_tokenizer(workdir):
    """A Qwen3 tokenizer from the repo's files only (no network)."""
    from transformers import AutoTokenizer

    with gzip.open(os.path.join(QWEN3TOK, "tokenizer.json.gz"), "rb") as src, \
            open(os.path.join(workdir, "tokenizer.json"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(os.path.join(QWEN3TOK, "tokenizer_config.json"), workdir)
    return AutoTokenizer.from_pretrained(workdir, local_files_only=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where to write golden.json")
    ap.add_argument("--source-out", help="also save transformers' chat_template_utils.py here")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import jinja2
    import transformers
    from transformers.utils import chat_template_utils

    templates = {}
    with tempfile.TemporaryDirectory() as work:
        tok = build_tokenizer(work)
        templates["qwen3"] = tok.chat_template
        for name, fname in TEMPLATE_FILES.items():
            with open(os.path.join(TESTDATA, fname), encoding="utf-8") as f:
                templates[name] = f.read()

        out_cases = []
        for case in CASES:
            for tname in case.get("templates", DEFAULT_TEMPLATES):
                kwargs = case.get("kwargs", {})
                rec = {
                    "name": case["name"] + "/" + tname,
                    "template": tname,
                    "messages": case["messages"],
                    "tools": case.get("tools"),
                    "add_generation_prompt": case["add_generation_prompt"],
                    "kwargs": kwargs,
                }
                try:
                    rec["rendered"] = tok.apply_chat_template(
                        case["messages"], tools=case.get("tools"), tokenize=False,
                        add_generation_prompt=case["add_generation_prompt"],
                        chat_template=templates[tname], **kwargs)
                except Exception as e:  # the Go side must fail on these too
                    rec["error"] = "%s: %s" % (type(e).__name__, e)
                out_cases.append(rec)

    golden = {
        "generator": "scripts/golden_chat.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "python": sys.version.split()[0],
        "special_tokens": {"bos_token": tok.bos_token, "eos_token": tok.eos_token},
        "template_sha256": {n: hashlib.sha256(t.encode("utf-8")).hexdigest() for n, t in sorted(templates.items())},
        "cases": out_cases,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    if args.source_out:
        shutil.copy(inspect.getsourcefile(chat_template_utils), args.source_out)
    ok = sum("rendered" in c for c in out_cases)
    print("wrote %d cases (%d rendered, %d errors) with transformers %s, jinja2 %s"
          % (len(out_cases), ok, len(out_cases) - ok, transformers.__version__, jinja2.__version__))


if __name__ == "__main__":
    main()
