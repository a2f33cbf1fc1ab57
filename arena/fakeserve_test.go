package arena

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestMain makes the test binary a stand-in for `lowbit serve` when it is
// run as one (from an engine directory's bin/lowbit), so that Check is
// tested end to end without a model: the fake speaks vLLM's shapes and
// misbehaves on request (--fake-* flags) for the violation cases.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(fakeServe(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// fakeServeFlags are the flags the fake accepts: lowbit serve's, as
// launch.sh passes them, and the misbehaviours.
func fakeServeFlags() (*flag.FlagSet, map[string]*string, map[string]*bool) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	str := map[string]*string{}
	for _, f := range serveFlagsUsed {
		if f != "no-enable-prefix-caching" {
			str[f] = fs.String(f, "", "")
		}
	}
	bools := map[string]*bool{}
	for _, f := range []string{languageModelOnlyFlag, "no-enable-prefix-caching", "fake-no-prompt-logprobs", "fake-ignore-max-len",
		"fake-write-artifact", "fake-ignore-term"} {
		bools[f] = fs.Bool(f, false, "")
	}
	return fs, str, bools
}

func fakeServe(args []string) int {
	fs, str, bools := fakeServeFlags()
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
		// Cobra's layout, which InspectBinary reads.
		fmt.Println("Usage:\n  lowbit serve MODEL_DIR [flags]\n\nFlags:")
		fs.VisitAll(func(f *flag.Flag) { fmt.Printf("      --%s string   fake\n", f.Name) })
		fmt.Println("  -h, --help   help for serve")
		return 0
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "fake serve: no model directory")
		return 2
	}
	model := args[0]
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "fake serve: bad flags", err, fs.Args())
		return 2
	}
	maxLen, err := strconv.Atoi(*str["max-model-len"])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake serve: --max-model-len:", err)
		return 2
	}
	if *bools["fake-write-artifact"] {
		f, err := os.OpenFile(filepath.Join(model, "config.json"), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.WriteString(" ")
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake serve: cannot write the artifact:", err)
			return 1
		}
	}
	if *bools["fake-ignore-term"] {
		signal.Ignore(syscall.SIGTERM)
	}
	name := *str["served-model-name"]
	l, err := net.Listen("tcp", net.JoinHostPort(*str["host"], *str["port"]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake serve:", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"object": "list",
			"data": []any{map[string]any{"id": name, "object": "model", "max_model_len": maxLen}}})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model          string          `json:"model"`
			Prompt         json.RawMessage `json:"prompt"`
			MaxTokens      int             `json:"max_tokens"`
			PromptLogprobs *int            `json:"prompt_logprobs"`
			Stream         bool            `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		var ids []int
		if json.Unmarshal(req.Prompt, &ids) != nil {
			var s string
			json.Unmarshal(req.Prompt, &s)
			for _, c := range []byte(s) {
				ids = append(ids, int(c))
			}
		}
		switch {
		case req.Model != "" && req.Model != name:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error": {"message": "The model %s does not exist.", "code": 404}}`, req.Model)
			return
		case len(ids)+req.MaxTokens > maxLen && !*bools["fake-ignore-max-len"]:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error": {"message": "This model's maximum context length is %d tokens.", "code": 400}}`, maxLen)
			return
		}
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			for range req.MaxTokens {
				fmt.Fprintf(w, "data: {\"object\": \"text_completion\", \"model\": %q, \"choices\": [{\"index\": 0, \"text\": \"a\"}]}\n\n", name)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		choice := map[string]any{"index": 0, "text": "ab", "finish_reason": "length"}
		if req.PromptLogprobs != nil && !*bools["fake-no-prompt-logprobs"] {
			pl := []any{nil}
			for _, id := range ids[1:] {
				pl = append(pl, map[string]any{
					strconv.Itoa(id): map[string]any{"logprob": -2.5, "rank": 4, "decoded_token": "x"},
					"1":              map[string]any{"logprob": -0.25, "rank": 1, "decoded_token": "y"}})
			}
			choice["prompt_logprobs"] = pl
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "text_completion", "model": name, "choices": []any{choice},
			"usage": map[string]int{"prompt_tokens": len(ids), "completion_tokens": req.MaxTokens}})
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(map[string]any{"object": "chat.completion", "model": name,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": "hi"}}},
			"usage": map[string]int{"prompt_tokens": 9, "completion_tokens": 1}})
	})
	srv := &http.Server{Handler: mux}
	if !*bools["fake-ignore-term"] {
		go func() {
			ch := make(chan os.Signal, 1)
			signal.Notify(ch, syscall.SIGTERM)
			<-ch
			srv.Shutdown(context.Background())
		}()
	}
	if err := srv.Serve(l); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "fake serve:", err)
		return 1
	}
	return 0
}
