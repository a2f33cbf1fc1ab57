package arena

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidateCompletion: whatever a server answers, the prompt_logprobs
// check does not panic, and what it accepts has the shape the KL probe
// reads.
func FuzzValidateCompletion(f *testing.F) {
	good := `{"object":"text_completion","model":"m","choices":[{"text":"a","prompt_logprobs":[null,` +
		`{"7":{"logprob":-1.5,"rank":2,"decoded_token":"x"},"1":{"logprob":-0.2,"rank":1,"decoded_token":"y"}}]}],` +
		`"usage":{"prompt_tokens":2}}`
	f.Add(good)
	f.Add(strings.Replace(good, "null", "{}", 1))
	f.Add(strings.Replace(good, `"7"`, `"8"`, 1))
	f.Add(strings.Replace(good, "-1.5", "NaN", 1))
	f.Add(`{"object":"text_completion","model":"m","choices":[]}`)
	f.Fuzz(func(t *testing.T, body string) {
		if validateCompletion([]byte(body), []int{3, 7}, 1, "m") != nil {
			return
		}
		var r struct {
			Choices []struct {
				PromptLogprobs []map[string]any `json:"prompt_logprobs"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(body), &r) != nil || len(r.Choices) == 0 || len(r.Choices[0].PromptLogprobs) != 2 ||
			r.Choices[0].PromptLogprobs[1]["7"] == nil {
			t.Fatalf("accepted an answer without the actual token's entry: %s", body)
		}
	})
}

// FuzzParseProcNetTCP: parsing /proc/net/tcp never panics, and an accepted
// row has a 4- or 16-byte address.
func FuzzParseProcNetTCP(f *testing.F) {
	f.Add("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n")
	f.Add("header\n   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0 0 0 0 0 777\n")
	f.Add("header\n 0: zz:1 0 0A 0 0 0 0 0 1\n")
	f.Fuzz(func(t *testing.T, s string) {
		socks, err := parseProcNetTCP([]byte(s))
		if err != nil {
			return
		}
		for _, sk := range socks {
			if len(sk.ip) != 4 && len(sk.ip) != 16 || sk.port < 0 || sk.port > 65535 {
				t.Fatalf("accepted %+v", sk)
			}
		}
	})
}

func TestParseProcNetTCP(t *testing.T) {
	rows := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1\n" +
		"   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1\n" +
		"   2: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 333 1\n"
	socks, err := parseProcNetTCP([]byte(rows))
	if err != nil || len(socks) != 3 {
		t.Fatalf("%v %v", socks, err)
	}
	if s := socks[0]; s.ip.String() != "127.0.0.1" || s.port != 8080 || !s.listening || s.inode != 12345 {
		t.Errorf("row 0: %+v", s)
	}
	if s := socks[1]; s.ip.String() != "0.0.0.0" || s.port != 80 || !s.listening {
		t.Errorf("row 1: %+v", s)
	}
	if socks[2].listening {
		t.Error("an established connection read as listening")
	}
	v6 := "h\n 0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0 0 0 0 0 0 9\n"
	socks, err = parseProcNetTCP([]byte(v6))
	if err != nil || len(socks) != 1 || socks[0].ip.String() != "::1" {
		t.Errorf("IPv6 loopback: %v %v", socks, err)
	}
}

func TestValidateCompletion(t *testing.T) {
	good := `{"object":"text_completion","model":"m","choices":[{"text":"a","prompt_logprobs":[null,` +
		`{"7":{"logprob":-1.5,"rank":2,"decoded_token":"x"},"1":{"logprob":-0.2,"rank":1,"decoded_token":"y"}}]}],` +
		`"usage":{"prompt_tokens":2}}`
	if err := validateCompletion([]byte(good), []int{3, 7}, 1, "m"); err != nil {
		t.Fatalf("vLLM's shape refused: %v", err)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"other model name", strings.Replace(good, `"model":"m"`, `"model":"x"`, 1), "SERVED_NAME"},
		{"first entry not null", strings.Replace(good, "[null,", "[{},", 1), "want null"},
		{"actual token missing", strings.Replace(good, `"7"`, `"8"`, 1), "missing from its own entry"},
		{"too many entries", strings.Replace(good, `"1":`, `"2":{"logprob":-3,"rank":3,"decoded_token":"z"},"1":`, 1), "at most 1 more"},
		{"positive logprob", strings.Replace(good, "-1.5", "1.5", 1), "log-probability <= 0"},
		{"no rank", strings.Replace(good, `"rank":2,`, "", 1), "want {logprob, rank, decoded_token}"},
		{"wrong count", strings.Replace(good, `"prompt_tokens":2`, `"prompt_tokens":3`, 1), "prompt_tokens 3"},
		{"no prompt_logprobs", strings.Replace(good, `"prompt_logprobs"`, `"logprobs"`, 1), "0 prompt_logprobs entries"},
		{"not JSON", "<html>", "not vLLM's completion JSON"},
	} {
		err := validateCompletion([]byte(tt.body), []int{3, 7}, 1, "m")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}
