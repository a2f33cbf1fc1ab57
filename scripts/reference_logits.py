#!/usr/bin/env python3
"""Reference logits of Qwen3/Llama checkpoints, for runtime's golden tests (testdata/golden/logits/).

For each model directory: load it with transformers in float32 on the CPU (a BF16 checkpoint is widened
exactly, so this is the fp32 forward from the stored weights), run a fixed prompt of token ids (no
tokenizer involved), and write <out-dir>/<name>.json with, at every prompt position, the top-k of the
full-vocabulary log-softmax (ids and values), and a greedy continuation of --greedy tokens (use_cache,
with the top-1 minus top-2 log-probability gap at each step, to tell near ties).

Quantized checkpoints (compressed-tensors or ModelOpt, as lowbit quantize writes them) run the same
quantized numerics as lowbit's runtime, implemented here from vLLM's reading rules and the kernels.Weight
/ ActQuant contract, independently of lowbit's Go code:
  * weights dequantized in float32 from the stored tensors: FP8 e4m3(w)*scale (per channel, per tensor,
    or per 128x128 block); NVFP4 e2m1(code)*e4m3(block scale)*global, the global scale reduced over the
    fused layer as vLLM does (compressed-tensors 1/max(weight_global_scale), ModelOpt max(weight_scale_2));
    static per-tensor FP8 weight scales are used per shard (lowbit does not requantize fused shards to
    the largest scale as vLLM's requantize_with_max_scale does; a documented deviation);
  * activations quantized at every quantized nn.Linear input (monkey-patched forward), then a float32
    matmul: FP8 dynamic per token (s = amax/448, 1 for an all-zero row), static per tensor (s =
    input_scale, max over the fused layer), per 1x128 group; the value x/s clamped to +-448 and cast to
    torch.float8_e4m3fn (round to nearest even). NVFP4: per 16-group b = e4m3((amax/6)*G) (0.125 if 0),
    s = b/G, x/s rounded to the nearest E2M1 value (ties to even, clamped to 6), with G =
    max(input_global_scale) (compressed-tensors) or 1/max(input_scale) (ModelOpt) over the fused layer.

--write-stats PATH MODEL writes lowbit calibration statistics (calibrate/stats format version 1) of the
BF16 MODEL's linear inputs over a calibration prompt (CALIB, not the golden PROMPT), which the static
schemes (fp8, nvfp4) need to quantize.

On the GPU machine (torch 2.11, transformers 5.17, safetensors; everything runs on CPU tensors):
  python3 scripts/reference_logits.py --out-dir OUT MODEL_DIR...        # names: the directories' base names
  python3 scripts/reference_logits.py --write-stats OUT.safetensors BF16_DIR
scripts/device_reference.sh runs the whole set.
"""
import argparse
import hashlib
import json
import os
import platform
import shlex
import sys

# The fixed prompt (Qwen3 token ids drawn at random, PCG seed 750 in runtime's search): chosen so that, in
# lowbit's forward of every golden variant, no quantized activation lies within 2e-6 (relative) of a
# rounding boundary, over the prompt and the 16 greedy tokens. Activation quantization is discontinuous:
# a value on a boundary takes either code depending on the last bit of an RMSNorm, and the tiny random
# model amplifies that one code into log-probabilities that differ by up to 7 (runtime/fragile_test.go).
PROMPT = [7191, 11434, 64450, 47075, 120237, 65046, 12735, 16508, 74101, 66470, 100711, 58378, 51309, 2868,
          109580, 24903, 139710, 114192, 118873, 90741, 8544, 8551, 132739, 58614]
# The calibration prompt of --write-stats (a chat turn and some text): not the golden prompt, so that the
# static scales are not exact ratios of the activations the golden prompt quantizes.
CALIB = [151644, 872, 198, 785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 151645, 198,
         151644, 77091, 198, 40, 1079, 264, 4128, 1614, 13]
FUSED = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up"}
E2M1_STEPS = ((0.25, False, 0.5), (0.75, True, 1.0), (1.25, False, 1.5), (1.75, True, 2.0),
              (2.5, False, 3.0), (3.5, True, 4.0), (5.0, False, 6.0))  # (midpoint, tie goes up, value above)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tensors_of(d):
    """{name: (file, dtype string)} of a model directory, from the safetensors headers."""
    import struct
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    out = {}
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        for k, v in h.items():
            if k != "__metadata__":
                out[k] = (f, v["dtype"])
    return out


class Store:
    def __init__(self, d):
        self.d, self.idx, self.h, self.used = d, tensors_of(d), {}, set()

    def has(self, name):
        return name in self.idx

    def get(self, name):
        from safetensors import safe_open
        f = self.idx[name][0]
        if f not in self.h:
            self.h[f] = safe_open(os.path.join(self.d, f), framework="pt")
        self.used.add(name)
        return self.h[f].get_tensor(name)


def quant_scheme(d):
    """(layout, scheme) from config.json / hf_quant_config.json; (None, None) for BF16."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    qc = cfg.get("quantization_config")
    hf = os.path.join(d, "hf_quant_config.json")
    if qc is None and os.path.exists(hf):
        qc = dict(json.load(open(hf))["quantization"], quant_method="modelopt")
    if qc is None:
        return None, None
    method = qc.get("quant_method")
    if method == "compressed-tensors":
        groups = list(qc["config_groups"].values())
        w, a = groups[0]["weights"], groups[0].get("input_activations")
        if w["num_bits"] == 4:
            return "ct", "nvfp4" if a else "nvfp4a16"
        return "ct", {"channel": "fp8-dynamic", "tensor": "fp8", "block": "fp8-block"}[w["strategy"]]
    if method == "modelopt":
        algo = qc["quant_algo"]
        return "modelopt", {"FP8": "fp8", "NVFP4": "nvfp4", "FP8_PER_CHANNEL_PER_TOKEN": "fp8-dynamic"}[algo]
    raise SystemExit(f"{d}: quantization method {method!r} is not handled by this script")


def e2m1_round(v):
    """nearest E2M1 value of v (ties to even codes), clamped to +-6"""
    import torch
    a = v.abs()
    out = torch.zeros_like(a)
    for mid, up, above in E2M1_STEPS:
        out = torch.where(a >= mid if up else a > mid, torch.full_like(a, above), out)
    return torch.where(v < 0, -out, out)


def e4m3(x):
    import torch
    return x.clamp(-448, 448).to(torch.float8_e4m3fn).float()


def quantize_act(x, act, scale):
    """x quantized and dequantized as the kernels' ActQuant contract states; float32 in, float32 out;
    scale: the float32 0-d tensor of the static scale (fp8-tensor: input_scale; nvfp4: G)"""
    import torch
    if act == "fp8-token" or act == "fp8-group128":
        g = x.shape[-1] if act == "fp8-token" else 128
        xs = x.reshape(*x.shape[:-1], -1, g)
        amax = xs.abs().amax(-1, keepdim=True)
        s = torch.where(amax == 0, torch.ones_like(amax), amax / 448.0)
        return (e4m3(xs / s) * s).reshape(x.shape)
    if act == "fp8-tensor":
        return e4m3(x / scale) * scale
    if act == "nvfp4":
        G = scale
        xs = x.reshape(*x.shape[:-1], -1, 16)
        amax = xs.abs().amax(-1, keepdim=True)
        b = e4m3(amax / 6.0 * G)
        b = torch.where(b == 0, torch.full_like(b, 0.125), b)
        s = b / G
        return (e2m1_round(xs / s) * s).reshape(x.shape)
    raise ValueError(act)


def dequantize(S, layout, scheme, mod, out, inn, fused_globals):
    """(float32 weight [out, inn], activation quantization, its scale) of a quantized linear module"""
    import torch
    if scheme.startswith("nvfp4"):
        p = S.get(mod + (".weight_packed" if layout == "ct" else ".weight"))
        codes = torch.stack((p & 15, p >> 4), dim=-1).reshape(out, inn).long()
        lut = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)
        sc = S.get(mod + ".weight_scale").float().repeat_interleave(16, 1)
        return (lut[codes] * sc) * fused_globals["weight"], ("nvfp4" if scheme == "nvfp4" else None), fused_globals.get("input")
    w = S.get(mod + ".weight").float()
    sc = S.get(mod + ".weight_scale").float()
    if scheme == "fp8-dynamic":
        return w * sc.reshape(-1, 1), "fp8-token", None
    if scheme == "fp8":
        return w * sc.reshape(-1)[0], "fp8-tensor", fused_globals["input"]
    if scheme == "fp8-block":
        full = sc.repeat_interleave(128, 0)[:out].repeat_interleave(128, 1)[:, :inn]
        return w * full, "fp8-group128", None
    raise ValueError(scheme)


def fused_scales(S, layout, scheme, mods):
    """per-tensor values of each module after vLLM's reduction over its fused layer"""
    groups = {}
    for m in mods:
        parent, leaf = m.rsplit(".", 1)
        groups.setdefault(parent + "." + FUSED.get(leaf, leaf), []).append(m)

    import torch

    def biggest(suffix, members):  # a float32 0-d tensor
        return torch.stack([S.get(m + suffix).float().reshape(-1)[0] for m in members]).max()
    one = torch.tensor(1.0, dtype=torch.float32)
    res = {}
    for members in groups.values():
        r = {}  # float32 0-d tensors; reciprocals taken in float32, as lowbit takes them
        if scheme.startswith("nvfp4"):
            g = biggest(".weight_global_scale" if layout == "ct" else ".weight_scale_2", members)
            r["weight"] = one / g if layout == "ct" else g
            if scheme == "nvfp4":
                i = biggest(".input_global_scale" if layout == "ct" else ".input_scale", members)
                r["input"] = i if layout == "ct" else one / i
        elif scheme == "fp8":
            r["input"] = biggest(".input_scale", members)
        for m in members:
            res[m] = r
    return res


def load_model(d):
    import torch
    import transformers
    layout, scheme = quant_scheme(d)
    if scheme is None:
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        return model.eval(), None
    cfg = transformers.AutoConfig.from_pretrained(d)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    S = Store(d)
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    quantized = [n for n in linears if S.has(n + ".weight_packed") or
                 (S.has(n + ".weight") and S.idx[n + ".weight"][1] in ("F8_E4M3", "U8"))]
    scales = fused_scales(S, layout, scheme, quantized)
    sd = {}
    for name, p in model.state_dict().items():
        mod = name.rsplit(".", 1)[0]
        if mod in quantized and name.endswith(".weight"):
            lin = linears[mod]
            w, act, s = dequantize(S, layout, scheme, mod, lin.out_features, lin.in_features, scales[mod])
            sd[name] = w
            if act:
                lin.forward = (lambda lin, act, s: lambda x: torch.nn.functional.linear(quantize_act(x, act, s), lin.weight))(lin, act, s)
        elif S.has(name):
            sd[name] = S.get(name).float()
        elif name == "lm_head.weight" and cfg.tie_word_embeddings:
            sd[name] = S.get("model.embed_tokens.weight").float()
        else:
            raise SystemExit(f"{d}: no tensor for parameter {name}")
    model.load_state_dict(sd, strict=True)
    for m in quantized:  # scale tensors read only through fused_scales
        for suffix in (".weight_scale", ".weight_global_scale", ".weight_scale_2", ".input_scale", ".input_global_scale"):
            if S.has(m + suffix):
                S.used.add(m + suffix)
    left = sorted(set(S.idx) - S.used)
    if left:
        raise SystemExit(f"{d}: tensors this script did not use: {left[:8]}")
    return model, {"layout": layout, "scheme": scheme, "quantized_modules": len(quantized)}


def reference(d, name, args):
    import torch
    model, quant = load_model(d)
    ids = torch.tensor([args.tokens])
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        lp = torch.log_softmax(out.logits[0].float(), dim=-1)
        top = lp.topk(args.top, dim=-1)
        past, last = out.past_key_values, out.logits[0, -1].float()
        greedy, gaps = [], []
        for _ in range(args.greedy):
            tok = int(last.argmax())  # the first of equal maxima, as lowbit's argmax
            t2 = torch.log_softmax(last, -1).topk(2)
            greedy.append(tok)
            gaps.append(float(t2.values[0] - t2.values[1]))
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past, last = out.past_key_values, out.logits[0, -1].float()
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    import safetensors
    import transformers
    return {
        "name": name,
        "model_dir": os.path.basename(os.path.normpath(d)),
        "config_sha256": sha256_file(os.path.join(d, "config.json")),
        "weights_sha256": {f: sha256_file(os.path.join(d, f)) for f in files},
        "quantization": quant,
        "numerics": "transformers fp32 forward on CPU (eager attention) from the stored weights" +
                    ("" if quant is None else "; quantized linears: dequantized float32 weights, activations quantized per the ActQuant contract"),
        "prompt": args.tokens,
        "top_k": args.top,
        "positions": [{"ids": top.indices[t].tolist(), "logprobs": top.values[t].tolist()} for t in range(len(args.tokens))],
        "greedy": {"tokens": greedy, "top2_gap": gaps},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "safetensors": safetensors.__version__, "python": platform.python_version()},
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
    }


def write_stats(path, d, tokens):
    """lowbit calibration statistics (calibrate/stats version 1) of d's linear inputs over tokens"""
    import torch
    from safetensors.torch import save_file
    model, quant = load_model(d)
    if quant is not None:
        raise SystemExit(f"{d}: --write-stats needs the BF16 model")
    acc, hooks = {}, []
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and ".layers." in n:
            def hook(mod, inp, n=n):
                x = inp[0].detach().float().reshape(-1, inp[0].shape[-1]).abs()
                a = acc.setdefault(n, [torch.zeros(x.shape[1]), torch.zeros(x.shape[1], dtype=torch.float64), 0])
                a[0] = torch.maximum(a[0], x.amax(0))
                a[1] += x.double().sum(0)
                a[2] += x.shape[0]
            hooks.append(m.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(input_ids=torch.tensor([tokens]))
    tensors = {}
    for n, (amax, s, count) in sorted(acc.items()):
        tensors[n + ".input_absmax"] = amax.max().reshape(1).contiguous()
        tensors[n + ".input_channel_absmax"] = amax.contiguous()
        tensors[n + ".input_mean_abs"] = torch.minimum((s / count).float(), amax).contiguous()
    cfg = json.load(open(os.path.join(d, "config.json")))
    meta = {"lowbit_stats_version": "1", "model_type": cfg["model_type"],
            "config_sha256": sha256_file(os.path.join(d, "config.json")), "samples": "1",
            "tokens": str(len(tokens)), "seq_len": str(len(tokens)),
            "dataset": "scripts/reference_logits.py CALIB", "created_by": "scripts/reference_logits.py"}
    save_file(tensors, path, metadata=meta)
    print(f"wrote {path}: {len(acc)} modules")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="model directories")
    ap.add_argument("--out-dir", help="where <name>.json files go")
    ap.add_argument("--names", help="comma-separated names, one per model (default: directory base names)")
    ap.add_argument("--tokens", default=",".join(map(str, PROMPT)), help="comma-separated prompt token ids")
    ap.add_argument("--top", type=int, default=64, help="log-probabilities kept per position")
    ap.add_argument("--greedy", type=int, default=16, help="greedy tokens generated after the prompt")
    ap.add_argument("--write-stats", metavar="PATH", help="write calibration statistics of the one BF16 model")
    ap.add_argument("--calib-tokens", default=",".join(map(str, CALIB)), help="comma-separated token ids of --write-stats")
    args = ap.parse_args()
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.calib_tokens = [int(t) for t in args.calib_tokens.split(",")]
    import torch
    torch.manual_seed(0)
    if args.write_stats:
        if len(args.models) != 1:
            ap.error("--write-stats takes one model")
        write_stats(args.write_stats, args.models[0], args.calib_tokens)
        return
    if not args.out_dir:
        ap.error("--out-dir is required")
    names = args.names.split(",") if args.names else [os.path.basename(os.path.normpath(d)) for d in args.models]
    if len(names) != len(args.models):
        ap.error("--names needs one name per model")
    os.makedirs(args.out_dir, exist_ok=True)
    status = 0
    for d, name in zip(args.models, names):
        try:
            res = reference(d, name, args)
        except Exception as e:  # one broken variant does not stop the others
            print(f"FAILED {name}: {type(e).__name__}: {e}", file=sys.stderr)
            status = 1
            continue
        path = os.path.join(args.out_dir, name + ".json")
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        print(f"wrote {path}: greedy {res['greedy']['tokens']}")
    sys.exit(status)


if __name__ == "__main__":
    main()
