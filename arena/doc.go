// Package arena packages lowbit's server for the evaluations it is built
// for, and checks a package against the evaluation's contract before a
// submission spends GPU time.
//
// # LowBArena
//
// LowBArena (shared/seeds/002_…) runs an engine directory's `launch.sh
// serve` with its environment contract: ARTIFACT (the read-only
// checkpoint), TOKENIZER, PORT (serve on 127.0.0.1:$PORT), SERVED_NAME,
// MAX_MODEL_LEN, GPU_MEMORY_UTILIZATION, GENERATION_CONFIG, KV_CACHE_DTYPE
// and LANGUAGE_MODEL_ONLY, as an unprivileged user with loopback networking
// only; nothing but the directory comes with it. WriteLowBArena writes:
//
//	launch.sh      `serve` execs bin/lowbit serve with the contract's
//	               variables mapped to vLLM's flag names, read on every start
//	bin/lowbit     a linux/amd64 lowbit built with cgo (its kernels inside)
//	kernels/       the C and CUDA kernel sources the binary was built from,
//	               to read (the binary embeds them)
//	ENGINE.md      what the directory holds, the binary's provenance, and
//	               how to submit it
//
// # Switchboard
//
// Switchboard (shared/seeds/000_…) takes readable source and a
// switchboard.json that says how to build and start the server; builds run
// offline from a pinned image, and it accepts no binaries and no
// compressed, encoded or obfuscated source. Its text does not give the
// schema of switchboard.json, so WriteSwitchboard writes an assumed
// minimal one (build command, start command, port, health path) and
// SWITCHBOARD.md says so; the source is `git archive HEAD` unpacked as
// plain files (tests and test data left out), with its Go dependencies
// vendored so that `go build` needs no network.
//
// # Check
//
// Check starts an engine directory as LowBArena would — `bash launch.sh
// serve` in a new process group from a read-only copy of the directory,
// with only the contract's variables and a private $HOME, the artifact in a
// read-only directory, as the unprivileged user nobody when run as root —
// and probes it: /health, /v1/models, /v1/completions with prompt_logprobs
// (the KL probe's input) and streaming, /v1/chat/completions, a prompt
// longer than MAX_MODEL_LEN, the sockets it listens on (127.0.0.1:$PORT
// only), whether launch.sh exec'd the server, whether SIGTERM to the
// process group stops everything, and whether the artifact was left
// unchanged. It starts the engine twice with different PORT, SERVED_NAME
// and MAX_MODEL_LEN, since the arena restarts it under memory caps. Each
// breach of the contract is a Finding that says what was seen and what
// the contract asks.
package arena
