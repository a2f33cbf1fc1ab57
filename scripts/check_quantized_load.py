#!/usr/bin/env python3
"""Independent load check of a quantized checkpoint, read the way vLLM reads it.

Checks, failing (exit 1) on any violation:
  1. config.json quantization_config (else hf_quant_config.json, as vLLM's get_config) is
     compressed-tensors (CT) or ModelOpt; every Linear of the BF16 source is decided quantized or
     not, and with which scheme, by vLLM's rules (CT ignore/targets: exact, `re:` re.match, class
     substring, fused shards, FusedMoE from expert 0; ModelOpt excludes: exact, substring, fnmatch).
  2. per Linear (*_proj, mlp.gate, shared_expert_gate, lm_head, qwen3_5_moe fused experts split per
     expert) exactly the tensors vLLM creates for that scheme, dtypes and shapes, nothing left over;
     BF16 Linears and all other source tensors bit-identical to the source;
  3. each quantized weight dequantized as vLLM's loader does (scales reduced over fused shards as
     vLLM reduces them): NMSE = ||deq-src||^2/||src||^2 in float64, summarised per scheme;
  4. fused groups (q/k/v, gate/up, in_proj_qkv+z, in_proj_b+a, expert gate/up) share one status and
     one NVFP4 global scale;
  5. KV: kv_cache_scheme/kv_cache_quant_algo null iff no k_scale/v_scale; else every full-attention
     layer has finite positive ones;
  6. --forward: source logits vs the same transformers model with dequantized Linear weights.
Independence: written from vLLM's Python source (cited inline) and public format notes; shares no
code with lowbit's Go implementation.

On the GPU machine (torch 2.11, safetensors 0.8, transformers 5.17; no vLLM needed):
  python3 scripts/check_quantized_load.py --source BF16_DIR --quantized QUANT_DIR [--json OUT.json] [--forward]
  python3 scripts/check_quantized_load.py --self-test   # stdlib parts anywhere; with torch, tiny
      end-to-end checkpoints from plain reference quantizers: good ones must pass, broken ones fail
"""
import argparse
import fnmatch
import json
import math
import os
import re
import statistics
import struct
import sys
import tempfile
from collections import defaultdict

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
THRESHOLDS = {"fp8": (1e-2, 1e-3), "nvfp4": (5e-2, 1e-2)}  # NMSE: (hard fail, expected)
JUSTIFY = [
    "FP8 E4M3 has 3 mantissa bits: relative rounding error up to 2^-4 (bottom of a binade), RMS about",
    "  2^-4/sqrt(3) = 3.6e-2, so NMSE <= ~1.3e-3 for values spread over binades; 1e-2 is ~8x that.",
    "NVFP4: E2M1 (0..6) with one E4M3 scale per 16 gives NMSE around 1e-2 on Gaussian blocks; 5e-2 is",
    "  5x that. Outlier-heavy real weights sit above the Gaussian figure and below the hard limit.",
]
FLOATS, ONE = {"F32", "BF16", "F16"}, [(1,), ()]  # PerTensorScaleParameter loads [1] or a 0-d scalar
ACT_FORMATS = {"naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized",
               "mxfp4-pack-quantized"}  # compressed_tensors/utils.py is_activation_quantization_format
# packed_modules_mapping of qwen3.py, qwen3_moe.py, qwen3_5.py (Qwen3_5ForCausalLMBase)
FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"],
         "in_proj_qkvz": ["in_proj_qkv", "in_proj_z"], "in_proj_ba": ["in_proj_b", "in_proj_a"]}
SHARD_OF = {s: f for f, ss in FUSED.items() for s in ss}
VCLASS = {"qkv_proj": "QKVParallelLinear", "o_proj": "RowParallelLinear", "down_proj": "RowParallelLinear",
          "out_proj": "RowParallelLinear"}  # else MergedColumnParallelLinear / ColumnParallelLinear
# qwen3_vl.py hf_to_vllm_mapper, inherited by the Qwen3.5 multimodal classes
VL_ARCHS = {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"}
VL_MAP = (("model.visual.", "visual."), ("lm_head.", "language_model.lm_head."),
          ("model.language_model.", "language_model.model."))
KV_LEAVES, WKEYS = ("k_scale", "v_scale", "q_scale", "prob_scale", "kv_scale"), ("weight", "weight_packed")
DEV = None


# ------------------------------------------------------------ pure Python: formats, files, vLLM rules
def e2m1(code):
    """bit 3 sign, bits 0-2 index (modelopt.py FP4_E2M1_LUT; nvfp4_emulation_utils.py break_fp4_bytes)"""
    return -E2M1[code & 7] if code & 8 else E2M1[code & 7]


def unpack_fp4(data):
    """element 2i is the LOW nibble of byte i (break_fp4_bytes stacks (low, high))"""
    return [v for b in data for v in (e2m1(b & 15), e2m1(b >> 4))]


def e4m3(byte):
    """FP8 E4M3FN: bias 7, no infinities, S.1111.111 is NaN"""
    s, e, m = -1.0 if byte & 0x80 else 1.0, (byte >> 3) & 15, byte & 7
    if e == 15 and m == 7:
        return math.nan
    return s * (m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def nmse(deq, src):
    num, den = sum((a - b) ** 2 for a, b in zip(deq, src)), sum(b * b for b in src)
    return num / den if den else (0.0 if num == 0 else math.inf)


def block_scale_shape(out, inn, block):
    return (-(-out // block[0]), -(-inn // block[1]))


def index_dir(d):
    """{tensor: (dtype, shape, file)} from the safetensors headers alone"""
    idx = {}
    for fn in sorted(f for f in os.listdir(d) if f.endswith(".safetensors")):
        with open(os.path.join(d, fn), "rb") as f:
            h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for k, v in h.items():
            if k != "__metadata__":
                if k in idx:
                    raise ValueError(f"{d}: {k} is in both {idx[k][2]} and {fn}")
                idx[k] = (v["dtype"], tuple(v["shape"]), fn)
    return idx


def _json(p):
    with open(p) as f:
        return json.load(f)


def _match(value, target, contains=False):
    """compressed_tensors/utils.py _is_equal_or_regex_match (vLLM uses `regex as re`)"""
    if target.startswith("re:"):
        return re.match(target[3:], value) is not None
    return target.lower() in value.lower() if contains else target == value


def ct_ignored(name, ignore):
    """compressed_tensors/utils.py should_ignore_layer: a fused name is expanded into shards that must agree"""
    proj = name.split(".")[-1]
    if proj in FUSED and name not in ignore:
        states = {any(_match(name.replace(proj, s), t) for t in ignore) for s in FUSED[proj]}
        if len(states) > 1:
            raise ValueError(f"shards {FUSED[proj]} of {name} differ in ignore status; vLLM raises 'Found a "
                             "different quantization schemes ... requires all to use the same scheme'")
        return states.pop()
    return any(_match(name, t) for t in ignore)


def ct_target(name, cls, targets):
    """compressed_tensors/utils.py find_matched_target: layer name, then class name (case-insensitive
    substring), then all shards of a fused name; None means vLLM cannot load the layer"""
    for t in targets:
        if _match(name, t):
            return t
    for t in targets:
        if _match(cls, t, contains=True):
            return t
    key = next((k for k in FUSED if name.endswith(k)), None)
    hits = [next((t for t in targets if _match(name.replace(key, s), t)), None) for s in FUSED[key]] if key else [None]
    return hits[0] if all(hits) else None


def mo_excluded(prefix, excludes):
    """modelopt.py ModelOptQuantConfigBase.is_layer_excluded: quant_utils.is_layer_skipped (exact; fused
    shards agree; a FusedMoE prefix is skipped if any exclude naming 'experts' contains it), then
    substring, then fnmatch"""
    if not excludes:
        return False
    proj = prefix.split(".")[-1]
    if proj in FUSED:
        states = {prefix.replace(proj, s) in excludes for s in FUSED[proj]}
        if len(states) > 1:
            raise ValueError(f"shards of {prefix} differ in exclusion; vLLM raises 'Detected some but not all shards'")
        hit = states.pop()
    else:
        hit = any(prefix in e for e in excludes if "experts" in e) if "experts" in prefix else prefix in excludes
    lm = prefix[len("language_model."):] if prefix.startswith("language_model.") else None
    return hit or any(e != prefix and (e in prefix or (lm is not None and e in lm)) for e in excludes) \
        or any(fnmatch.fnmatch(prefix, e) for e in excludes)


def pmap_fn(arch):
    """WeightsMapper.orig_to_new_prefix, applied in order, to names and patterns"""
    def pmap(s):
        for a, b in VL_MAP if arch in VL_ARCHS else ():
            s = b + s[len(a):] if s.startswith(a) else s
        return s
    return pmap


# ------------------------------------------------------------ config -> schemes
class Scheme:
    def __init__(self, label, family, layout, strategy=None, block=None, static_input=False, act=False):
        self.label, self.family, self.layout, self.strategy = label, family, layout, strategy
        self.block, self.static_input, self.act = block, static_input, act


def _qargs(d):
    """compressed-tensors QuantizationArgs defaults, for the fields vLLM reads"""
    if not d:
        return None
    a = dict(num_bits=8, type="int", symmetric=True, dynamic=False, group_size=None, strategy=None, block_structure=None)
    a.update({k: d[k] for k in a if k in d})
    a["strategy"] = a["strategy"] or ("block" if a["block_structure"] else "group" if a["group_size"] else "tensor")
    return a


def ct_classify(g):
    """compressed_tensors.py CompressedTensorsConfig._get_scheme_from_parts, FP8 and NVFP4 branches"""
    w, a, fmt = g["weights"], g["input_activations"], g["format"]
    nv = lambda x: bool(x) and x["strategy"] == "tensor_group" and x["type"] == "float" \
        and x["num_bits"] == 4 and x["group_size"] == 16 and x["symmetric"]  # _is_nvfp4_format
    if nv(w) and a is None:
        return Scheme("nvfp4a16", "nvfp4", "ct")  # CompressedTensorsW4A16Fp4
    if fmt in ACT_FORMATS:
        if nv(w) and nv(a):  # W4A4Fp4, or W4A16Fp4(has_input_global_scale=True) without cutlass FP4
            return Scheme("nvfp4", "nvfp4", "ct", act=True)
        if w["type"] == "float" and w["num_bits"] == 8 and w["symmetric"] and not w["dynamic"] \
                and w["strategy"] in ("tensor", "channel", "block"):  # _is_fp8_w8a8 / _is_fp8_w8a16
            static = a is not None and not a["dynamic"]
            if w["strategy"] == "block" and (static or not w["block_structure"]):
                raise ValueError("FP8 block weights need block_structure and dynamic activations")
            return Scheme("fp8-" + w["strategy"], "fp8", "ct", w["strategy"],
                          tuple(w["block_structure"] or ()) or None, static_input=static)
    raise ValueError(f"no FP8/NVFP4 scheme for weights={w} input={a} format={fmt}")


def load_qconfig(qdir, R):
    cfg = _json(os.path.join(qdir, "config.json"))
    qc, origin, hfq = cfg.get("quantization_config"), "config.json", os.path.join(qdir, "hf_quant_config.json")
    if qc is None and os.path.exists(hfq):  # transformers_utils/config.py get_config: a fallback only
        qc, origin = _json(hfq), "hf_quant_config.json"
    elif os.path.exists(hfq):  # read by vLLM only without config.json's: it must at least agree with it
        h, alg = _json(hfq).get("quantization", {}), qc.get("quant_algo", qc.get("quantization", {}).get("quant_algo"))
        if str(h.get("quant_algo")).upper() != str(alg).upper() or set(h.get("exclude_modules") or []) != set(
                qc.get("ignore", qc.get("quantization", {}).get("exclude_modules")) or []):
            R.W("hf_quant_config.json disagrees with config.json's quantization_config, which is what vLLM reads")
    if qc is None:
        raise ValueError("no quantization_config in config.json and no hf_quant_config.json")
    C = {"origin": origin, "cfg": cfg}
    method = str(qc.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors")
    if qc.get("producer", {}).get("name") == "modelopt" and "quantization" in qc:
        method = "modelopt"  # config.py _normalize_quantization_config
    if method == "compressed-tensors":
        if qc.get("transform_config") or qc.get("sparsity_config"):
            raise ValueError("transform_config/sparsity_config present: not covered by this check")
        groups, targets = {}, []
        for v in qc.get("config_groups", {}).values():
            if len(v["targets"]) == 1 and v["targets"][0].endswith("Attention"):
                continue  # CompressedTensorsConfig.from_config drops attention-only groups
            g = {"weights": _qargs(v.get("weights")), "input_activations": _qargs(v.get("input_activations")),
                 "format": v.get("format") or qc.get("format")}
            for t in v["targets"]:  # _quantization_scheme_map_from_config: a later group overrides a target
                groups[t], targets = g, [x for x in targets if x != t] + [t]
        kv = qc.get("kv_cache_scheme")
        C.update(method="compressed-tensors", groups=groups, targets=targets, ignore=qc.get("ignore", []),
                 kv=kv, kv_declared=kv is not None)
        if kv is not None and (kv.get("type") != "float" or kv.get("num_bits") != 8 or not kv.get("symmetric")
                               or kv.get("strategy") not in ("tensor", "attn_head")):
            R.F(f"kv_cache_scheme {kv}: vLLM supports float, 8 bits, symmetric, tensor|attn_head "
                "(CompressedTensorsKVCacheMethod.validate_kv_cache_scheme)")
    elif method.startswith("modelopt"):  # modelopt.py ModelOptQuantConfigBase.from_config
        if "quantization" in qc:
            q = qc["quantization"]
            algo, kvalgo, ex, gsz = q.get("quant_algo"), q.get("kv_cache_quant_algo"), q.get("exclude_modules"), q.get("group_size")
            miss = [f for f in ("group_size", "kv_cache_quant_algo", "exclude_modules") if f not in q]
            if "NVFP4" in str(algo).upper() and miss:
                R.F(f"{origin}: vLLM requires {miss} for ModelOpt NVFP4 (ModelOptNvFp4Config._from_config)")
        else:
            kvs, algo, ex, gsz = qc.get("kv_cache_scheme"), qc.get("quant_algo"), qc.get("ignore"), qc.get("group_size")
            kvalgo = "FP8" if isinstance(kvs, dict) and kvs.get("type") == "float" and kvs.get("num_bits") == 8 else None
        S = {"FP8": Scheme("fp8-tensor", "fp8", "mo", "tensor", static_input=True),
             "FP8_PER_CHANNEL_PER_TOKEN": Scheme("fp8-channel", "fp8", "mo", "channel"),
             "FP8_PB_WO": Scheme("fp8-block", "fp8", "mo", "block", (128, 128)),
             "NVFP4": Scheme("nvfp4", "nvfp4", "mo", act=True), "W4A16_NVFP4": Scheme("nvfp4a16", "nvfp4", "mo")}
        algo = str(algo).upper()
        if algo not in S:
            raise ValueError(f"ModelOpt quant_algo {algo} is not covered by this check")
        if S[algo].family == "nvfp4" and (gsz or 16) != 16:
            R.F(f"ModelOpt group_size {gsz}: NVFP4 needs 16")
        if kvalgo is not None and str(kvalgo).upper() not in ("FP8", "NVFP4"):
            R.F(f"kv_cache_quant_algo {kvalgo} is not in vLLM's KV_CACHE_QUANT_ALGOS")
        C.update(method="modelopt", scheme=S[algo], excludes=list(ex or []), kv=kvalgo, kv_declared=kvalgo is not None)
    else:
        raise ValueError(f"quant_method {method!r}: only compressed-tensors and modelopt are checked")
    return C


# ------------------------------------------------------------ source modules and vLLM's decisions
class Mod:
    def __init__(self, hf, kind, out, inn, src):
        self.hf, self.kind, self.out, self.inn, self.src = hf, kind, out, inn, src  # src: (tensor, expert, row0)
        self.parent, self.leaf = hf.rsplit(".", 1) if "." in hf else ("", hf)
        self.status, self.ok, self.t, self.names, self.eff = None, True, {}, {}, None


def enumerate_modules(src):
    mods, other = [], []
    for name, (dt, sh, _) in sorted(src.items()):
        if re.search(r"\.mlp\.experts\.(gate_up_proj|down_proj)$", name) and len(sh) == 3:
            p, up = name.rsplit(".", 1)[0], name.endswith("gate_up_proj")
            for e in range(sh[0]):  # qwen3_5.py load_weights: gate_up chunk(2, dim=-2) -> w1 (gate), w3 (up)
                mods += [Mod(f"{p}.{e}.gate_proj", "expert", sh[1] // 2, sh[2], (name, e, 0)),
                         Mod(f"{p}.{e}.up_proj", "expert", sh[1] // 2, sh[2], (name, e, sh[1] // 2))] if up \
                    else [Mod(f"{p}.{e}.down_proj", "expert", sh[1], sh[2], (name, e, 0))]
            continue
        base = name[:-7] if name.endswith(".weight") and len(sh) == 2 else ""
        leaf, visual = base.split(".")[-1], base.startswith(("model.visual.", "visual."))
        kind = "expert" if re.search(r"\.experts\.\d+\.\w+_proj$", base) else \
            "router" if base.endswith(".mlp.gate") or leaf == "shared_expert_gate" else \
            "lm_head" if leaf == "lm_head" else \
            "visual" if visual and "norm" not in leaf and "embed" not in base else \
            "linear" if (leaf.endswith("_proj") or leaf in SHARD_OF) and not visual else None  # + in_proj_qkv/z/b/a
        if base and kind:
            mods.append(Mod(base, kind, sh[0], sh[1], (name, None, 0)))
        else:
            other.append(name)
    return mods, other


def decide(mods, C, pmap, tied, R):
    """quantized or not, and the scheme, per module, as vLLM's get_quant_method decides"""
    ct = C["method"] == "compressed-tensors"
    mp = lambda t: pmap(t) if "." in t and not t.startswith("re:") else t  # CT apply_vllm_mapper
    ign, tmap = [mp(t) for t in C.get("ignore", [])], {mp(t): t for t in C.get("targets", [])}
    excl = [pmap(e) for e in C.get("excludes", [])]
    moe_targets = list(tmap) + (["FusedMoE"] if "Linear" in tmap and "FusedMoE" not in tmap else [])

    def scheme_of(vname, cls, targets):  # CompressedTensorsConfig.get_scheme_dict
        if ct_ignored(vname, ign):
            return None
        t = ct_target(vname, cls, targets)
        if t is None:
            raise ValueError(f"{vname}: neither ignored nor matched by a target ('Unable to find matching target')")
        return C["groups"][tmap.get(t, "Linear")]  # FusedMoE aliases Linear (_add_fused_moe_to_target_scheme_map)
    memo, layers = {}, defaultdict(list)
    for m in mods:
        if m.kind == "expert":
            layers[m.hf.rsplit(".", 2)[0]].append(m)
        if m.kind in ("expert", "router") or (m.kind == "lm_head" and tied):
            continue  # routers: ReplicatedLinear(quant_config=None) in qwen3_moe.py / qwen2_moe.py / qwen3_next.py
        fused = SHARD_OF.get(m.leaf) if m.kind != "visual" else None
        vname = pmap(m.parent + "." + (fused or m.leaf) + ".")[:-1]
        if vname not in memo:
            try:
                if not ct:  # ModelOpt get_quant_method: vision prefixes, exclusion, else the one scheme
                    skip = any(v in vname for v in ("vision_tower", "vision_model", "visual")) or mo_excluded(vname, excl)
                    memo[vname] = None if skip else C["scheme"]
                elif m.kind == "lm_head":
                    memo[vname] = None  # ParallelLMHead is no LinearBase: CT get_quant_method returns None
                else:
                    g = scheme_of(vname, VCLASS.get(fused or m.leaf, "MergedColumnParallelLinear" if fused
                                                    else "ColumnParallelLinear"), list(tmap))
                    memo[vname] = ct_classify(g) if g and g["weights"] else None
            except ValueError as e:
                R.F(str(e))
                memo[vname] = "error"
        m.status = memo[vname]
    for prefix, ms in layers.items():  # compressed_tensors_moe.py CompressedTensorsMoEMethod.get_moe_method
        vp = pmap(prefix + ".")[:-1]
        try:
            if not ct:
                st = None if mo_excluded(vp, excl) else C["scheme"]
            else:
                ds = [scheme_of(f"{vp}.0.{p}", "FusedMoE", moe_targets) for p in ("gate_proj", "up_proj", "down_proj")]
                if any(d != ds[0] for d in ds):
                    raise ValueError(f"{prefix}: expert 0's gate/up/down differ; vLLM raises 'All MoE projections "
                                     "need to have same quantization scheme'")
                for m in ms:
                    if scheme_of(pmap(m.hf + ".")[:-1], "FusedMoE", moe_targets) != ds[0]:
                        R.F(f"{m.hf}: config scheme differs from expert 0's, which vLLM applies to every expert")
                st = ct_classify(ds[0]) if ds[0] and ds[0]["weights"] else None
        except ValueError as e:
            R.F(str(e))
            st = "error"
        for m in ms:
            m.status = st


def expected(m):
    """{suffix: (dtypes, shapes, optional)} that vLLM's create_weights registers for this module"""
    s, out, inn = m.status, m.out, m.inn
    if s is None:
        return {"weight": ({m.src_dtype}, [(out, inn)], False)}
    if s.family == "nvfp4":  # compressed_tensors_w4a4_nvfp4.py / _w4a16_nvfp4.py; modelopt.py ModelOptNvFp4*LinearMethod
        e = {"weight_packed" if s.layout == "ct" else "weight": ({"U8"}, [(out, inn // 2)], False),
             "weight_scale": ({"F8_E4M3"}, [(out, inn // 16)], False)}
        if s.layout == "ct":
            e["weight_global_scale"] = ({"F32"}, ONE, False)
            if s.act:
                e["input_global_scale"] = ({"F32"}, ONE, False)
        else:
            e.update(weight_scale_2=({"F32"}, ONE, False), input_scale=({"F32"}, ONE, not s.act))
        return e
    if s.strategy == "block":  # fp8_utils.py create_fp8_scale_parameter; modelopt.py ModelOptFp8PbWoLinearMethod
        sc = [block_scale_shape(out, inn, s.block)] if s.layout == "ct" else [(out // 128, 1, inn // 128, 1)]
    else:
        sc = ONE if s.strategy == "tensor" else [(out, 1)] if s.layout == "ct" else [(out,)]
    e = {"weight": ({"F8_E4M3"}, [(out, inn)], False), "weight_scale": (FLOATS, sc, False)}
    if s.static_input:
        e["input_scale"] = (FLOATS, ONE, False)
    return e


# ------------------------------------------------------------ torch: tensors, dequantization
class Store:
    def __init__(self, d):
        self.d, self.idx, self.h, self.last = d, index_dir(d), {}, (None, None)

    def get(self, name, cache=False):
        from safetensors import safe_open
        if cache and self.last[0] == name:
            return self.last[1]
        fn = self.idx[name][2]
        if fn not in self.h:
            self.h[fn] = safe_open(os.path.join(self.d, fn), framework="pt")
        t = self.h[fn].get_tensor(name)
        self.last = (name, t) if cache else self.last
        return t


def same_bits(a, b):
    import torch
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def src_rows(S, m, r0, r1):
    name, e, off = m.src
    t = S.get(name, cache=e is not None)
    return (t[e] if e is not None else t)[off + r0:off + r1]


def scalar(t):
    return float(t.float().reshape(-1)[0]) if t.numel() == 1 else math.nan


def dequant_rows(m, r0, r1):
    """rows r0:r1 of the weight vLLM computes with, float32 on DEV"""
    import torch
    s, t = m.status, m.t
    if s.family == "fp8":
        w, sc = t["weight"][r0:r1].to(DEV).float(), t["weight_scale"].to(DEV).float()
        if s.strategy == "channel":
            sc = sc.reshape(-1, 1)[r0:r1]
        elif s.strategy == "block":  # r0 is a multiple of the block height
            bh, bw = s.block
            sc = sc.reshape(sc.shape[0], -1)[r0 // bh:-(-r1 // bh)]
            sc = sc.repeat_interleave(bh, 0)[:r1 - r0].repeat_interleave(bw, 1)[:, :w.shape[1]]
        else:
            sc = sc.reshape(-1)[0]
        if m.eff is None:
            return w * sc  # w8a8_utils.requantize_with_max_scale: fused per-tensor shards -> the max scale
        return (w * sc / m.eff).clamp(-448, 448).to(torch.float8_e4m3fn).float() * m.eff
    p = t["weight_packed" if s.layout == "ct" else "weight"][r0:r1].to(DEV)
    codes = torch.stack((p & 15, p >> 4), dim=-1).reshape(p.shape[0], -1).long()
    lut = torch.tensor([e2m1(c) for c in range(16)], device=DEV)
    return lut[codes] * t["weight_scale"][r0:r1].to(DEV).float().repeat_interleave(16, 1) * m.eff


def deq_chunks(m):
    ch = 8192 if m.status.block is None else m.status.block[0] * 64
    return [(r0, min(m.out, r0 + ch)) for r0 in range(0, m.out, ch)]


def group_scales(mods, R):
    """per-tensor scales as vLLM reduces them over fused shards: CT NVFP4 1/max(global)
    (w4a4/w4a16 process_weights_after_loading), ModelOpt max(weight_scale_2), MoE w13 the w1 value
    (moe nvfp4 process_weights_after_loading, 'w1_weight_global_scale must match'), FP8 per-tensor
    requantized to the max scale (fp8_utils.process_fp8_weight_tensor_strategy)"""
    groups = defaultdict(list)
    for m in mods:
        if isinstance(m.status, Scheme) and m.ok:
            key = ("w13", m.parent) if m.kind == "expert" and m.leaf != "down_proj" else \
                (m.parent, SHARD_OF[m.leaf]) if m.leaf in SHARD_OF and m.kind != "expert" else (m.hf,)
            groups[key].append(m)
    for key, ms in groups.items():
        s, gname = ms[0].status, ".".join(key)
        ms.sort(key=lambda x: x.leaf != "gate_proj")
        if s.family == "nvfp4":
            own = [scalar(m.t["weight_global_scale" if s.layout == "ct" else "weight_scale_2"]) for m in ms]
            if len(set(own)) > 1:
                R.F(f"NVFP4 global scales differ within fused group {gname}: {own}")
            pick = own[0] if key[0] == "w13" else max(own)
            for m in ms:
                m.eff = 1 / pick if s.layout == "ct" else pick
            ins = [scalar(m.t[k]) for m in ms for k in ("input_global_scale", "input_scale") if k in m.t]
            if len(set(ins)) > 1:
                R.W(f"input global scales differ within {gname} (vLLM uses the max): {ins}")
        elif s.strategy == "tensor":
            own = [scalar(m.t["weight_scale"]) for m in ms]
            for m, o in zip(ms, own):
                m.eff = max(own) if max(own) != o else None


# ------------------------------------------------------------ the check
class Report:
    def __init__(self):
        self.fail, self.warn, self.rows, self.info = [], [], [], {}
        self.F, self.W = self.fail.append, self.warn.append


def check(source, quant, forward=False, R=None):
    import torch
    global DEV
    DEV, R = torch.device("cuda" if torch.cuda.is_available() else "cpu"), R or Report()
    S, Q, scfg = Store(source), Store(quant), _json(os.path.join(source, "config.json"))
    C = load_qconfig(quant, R)
    arch, text = (scfg.get("architectures") or ["?"])[0], scfg.get("text_config", scfg)
    if C["cfg"].get("architectures") != scfg.get("architectures"):
        R.F(f"architectures differ: source {scfg.get('architectures')}, quantized {C['cfg'].get('architectures')}")
    R.info.update(method=C["method"], config=C["origin"], arch=arch, device=str(DEV))
    ip = os.path.join(quant, "model.safetensors.index.json")
    if os.path.exists(ip) and _json(ip).get("weight_map") != {k: v[2] for k, v in Q.idx.items()}:
        R.F("model.safetensors.index.json weight_map does not list exactly the tensors of the files")
    mods, other = enumerate_modules(S.idx)
    for m in mods:
        m.src_dtype = S.idx[m.src[0]][0]
    pmap = pmap_fn(arch)
    decide(mods, C, pmap, bool(scfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))), R)
    hf = [m.hf for m in mods]
    for t in [t for t in C.get("ignore", []) + C.get("targets", []) if t.startswith("re:") and arch in VL_ARCHS]:
        if any(_match(n, t) for n in hf) and not any(_match(pmap(n + ".")[:-1], t) for n in hf):
            R.W(f"{t} matches checkpoint names but no vLLM name: vLLM matches regexes after renaming "
                "model.language_model. -> language_model.model. (hf_to_vllm_mapper), so it has no effect there")
    for name in [n for n in S.idx if n.endswith(("experts.gate_up_proj", "experts.down_proj")) and n in Q.idx]:
        if all(m.status is None for m in mods if m.src[0] == name):  # BF16 experts kept fused: compare whole
            other.append(name)
            mods = [m for m in mods if m.src[0] != name]
    by_mod, used = defaultdict(dict), set()
    for n in Q.idx:
        by_mod[n.rsplit(".", 1)[0]][n.rsplit(".", 1)[1]] = n

    def bad(m, msg):  # warn only for mtp.* (qwen3_5.py load_weights skips it) and a dropped vision tower
        (R.W if m.hf.startswith(("mtp.", "model.visual.", "visual.")) else R.F)(msg)
        m.ok = False
    for m in mods:  # pass 1: names, dtypes, shapes, scale values
        have = {k: v for k, v in by_mod.get(m.hf, {}).items()
                if k != "bias" and not (k in KV_LEAVES and m.leaf in ("q_proj", "k_proj", "v_proj"))}
        used.update(have.values())
        if m.status == "error":
            m.ok = False
            continue
        want, what = expected(m), "BF16" if m.status is None else m.status.label
        for suf, (dts, shapes, opt) in want.items():
            if suf not in have and not opt:
                bad(m, f"{m.hf}: missing {suf} ({what} expected)")
            elif suf in have and (Q.idx[have[suf]][0] not in dts or Q.idx[have[suf]][1] not in shapes):
                dt, sh, _ = Q.idx[have[suf]]
                bad(m, f"{m.hf}.{suf}: {dt}{list(sh)}; vLLM expects {sorted(dts)} {[list(x) for x in shapes]} ({what})")
        for suf in sorted(set(have) - set(want)):
            bad(m, f"{m.hf}.{suf}: unexpected for a {what} Linear")
        if isinstance(m.status, Scheme) and m.status.family == "nvfp4" and m.inn % 16:
            bad(m, f"{m.hf}: in_features {m.inn} is not a multiple of 16")
        if m.ok:
            m.names = {suf: have[suf] for suf in want if suf in have}
            m.t = {suf: Q.get(n) for suf, n in m.names.items() if suf not in WKEYS}  # weights come in pass 2
            for suf, t in m.t.items():
                if not bool(torch.isfinite(t.float()).all()) or (t.numel() == 1 and scalar(t) <= 0):
                    bad(m, f"{m.hf}.{suf}: non-finite or non-positive scale")
    fg = defaultdict(list)  # fused groups: one status; FP8 block: merged shards but the last divide block_n
    for m in mods:
        key = (m.hf.rsplit(".", 2)[0], "experts") if m.kind == "expert" else (m.parent, SHARD_OF.get(m.leaf))
        if key[1]:
            fg[key].append(m)
    for key, ms in fg.items():
        kinds = {"BF16" if m.status is None else getattr(m.status, "label", "error") for m in ms}
        if len(kinds) > 1:
            R.F(f"fused group {'.'.join(key)} mixes {sorted(kinds)}")
        s = ms[0].status
        if isinstance(s, Scheme) and s.strategy == "block" and key[1] != "experts":
            for m in sorted(ms, key=lambda x: FUSED[key[1]].index(x.leaf))[:-1]:
                if m.out % s.block[0]:  # fp8_utils.py validate_fp8_block_shape
                    R.F(f"{m.hf}: out {m.out} of a merged layer is not a multiple of block_n {s.block[0]}")
    group_scales(mods, R)
    for m in mods:  # pass 2: numbers
        if not m.ok:
            continue
        m.t.update({k: Q.get(m.names[k]) for k in WKEYS if k in m.names})
        if m.status is None:
            if not same_bits(m.t["weight"], src_rows(S, m, 0, m.out)):
                bad(m, f"{m.hf}: BF16 Linear is not bit-identical to the source")
        else:
            num = den = 0.0
            for r0, r1 in deq_chunks(m):
                ref, deq = src_rows(S, m, r0, r1).to(DEV).double(), dequant_rows(m, r0, r1).double()
                num, den = num + float(((deq - ref) ** 2).sum()), den + float((ref * ref).sum())
            v = num / den if den else (0.0 if num == 0 else math.inf)
            R.rows.append({"name": m.hf, "scheme": m.status.label, "family": m.status.family, "nmse": v})
            if not v <= THRESHOLDS[m.status.family][0]:
                bad(m, f"{m.hf}: NMSE {v:.3g} > {THRESHOLDS[m.status.family][0]:g} ({m.status.label})")
        for k in WKEYS:
            m.t.pop(k, None)
    for name in other:  # everything that is not a Linear: bit-identical
        if name not in Q.idx:
            (R.W if name.startswith(("mtp.", "model.visual.", "visual.")) else R.F)(
                f"{name}: source tensor missing from the quantized checkpoint")
        else:
            used.add(name)
            if Q.idx[name][:2] != S.idx[name][:2] or not same_bits(Q.get(name), S.get(name)):
                R.F(f"{name}: not bit-identical to the source")
    kv_check(R, C, Q, mods, text, used)
    for n in sorted(set(Q.idx) - used):
        R.F(f"{n}: unexpected tensor (no source tensor or module accounts for it)")
    if forward:
        forward_check(R, source, Q, mods)
    return R


def kv_check(R, C, Q, mods, text, used):
    """a non-null kv_cache_scheme forces an FP8 KV cache (attention.py Attention.__init__); scales are
    per-tensor dequant multipliers (kv_cache.py; CompressedTensorsKVCacheMethod.create_weights); CT
    writes self_attn.k_scale, ModelOpt self_attn.k_proj.k_scale (weight_utils.maybe_remap_kv_scale_name)"""
    import torch
    attn, found = sorted({m.parent for m in mods if m.leaf == "k_proj" and m.parent.endswith("self_attn")}), defaultdict(dict)
    for n in Q.idx:
        base, leaf = n.rsplit(".", 1)
        if leaf in KV_LEAVES:
            found[base.rsplit(".", 1)[0] if base.endswith(("q_proj", "k_proj", "v_proj")) else base][leaf] = n
            used.add(n)
    R.info["kv_cache"] = f"{'fp8 (declared, forced by vLLM)' if C['kv_declared'] else 'auto'}; " \
                         f"{len(found)} of {len(attn)} full-attention layers carry scales"
    if not found:
        if C["kv_declared"]:
            R.F("KV cache declared (kv_cache_scheme / kv_cache_quant_algo) without k_scale/v_scale: vLLM forces "
                "FP8 KV at scale 1.0; an 'auto' checkpoint must write null")
        return
    if not C["kv_declared"]:
        R.W("k/v scales present but the KV cache is not declared: used only with --kv-cache-dtype fp8")
    for owner in sorted(set(found) - set(attn)):
        R.F(f"{owner}: KV scales on a module that is not a full-attention layer")
    per_head = isinstance(C["kv"], dict) and C["kv"].get("strategy") == "attn_head"
    for a in attn:
        for leaf in ("k_scale", "v_scale"):
            if leaf not in found.get(a, {}):
                R.F(f"{a}: {leaf} missing while other layers have KV scales")
        for leaf, n in found.get(a, {}).items():
            t = Q.get(n).float()
            if leaf in ("prob_scale", "kv_scale"):
                R.W(f"{n}: {leaf} is written by neither CT nor ModelOpt")
            if t.numel() not in ((text.get("num_key_value_heads"), 1) if per_head else (1,)) or Q.idx[n][0] not in FLOATS:
                R.F(f"{n}: {Q.idx[n][0]}{list(t.shape)} is not a float per-{'head' if per_head else 'tensor'} scale")
            elif not bool((torch.isfinite(t) & (t > 0)).all()):
                R.F(f"{n}: KV scale not finite and positive: {t.reshape(-1)[:4].tolist()}")


def forward_check(R, source, Q, mods):
    import torch
    import transformers
    try:
        cfg = transformers.AutoConfig.from_pretrained(source)
        model = getattr(transformers, cfg.architectures[0]).from_pretrained(source, dtype=torch.bfloat16).to(DEV).eval()
    except Exception as e:  # reported, not failed: the weight checks stand on their own
        R.info["forward"] = f"skipped: transformers cannot build the source ({type(e).__name__}: {e})"
        return
    params, missed = dict(model.named_parameters()), []
    ids = ((torch.arange(64) * 7919 + 13) % cfg.get_text_config().vocab_size).reshape(1, -1).to(DEV)
    with torch.no_grad():
        ref = model(input_ids=ids).logits.float()
        for m in (m for m in mods if isinstance(m.status, Scheme) and m.ok):
            m.t.update({k: Q.get(m.names[k]) for k in WKEYS if k in m.names})
            w = torch.cat([dequant_rows(m, r0, r1) for r0, r1 in deq_chunks(m)])
            for k in WKEYS:
                m.t.pop(k, None)
            name, e, off = m.src
            p = params.get(name)
            if p is None and m.kind == "expert":  # per-expert checkpoint, fused transformers parameter
                p = params.get(m.hf.rsplit(".", 2)[0] + (".down_proj" if m.leaf == "down_proj" else ".gate_up_proj"))
                e, off = int(m.hf.split(".")[-2]), (m.out if m.leaf == "up_proj" else 0)
            tgt = None if p is None else p.data if e is None else p.data[e]
            if tgt is not None and tgt.dim() == 2 and tgt.shape[1] == m.inn and tgt.shape[0] >= off + m.out:
                tgt[off:off + m.out].copy_(w.to(tgt.dtype))
            else:
                missed.append(m.hf)
        out = model(input_ids=ids).logits.float()
    d = (out - ref).abs()
    R.info["forward"] = {"tokens": ids.shape[1], "not_replaced": len(missed), "max_abs_dlogit": float(d.max()),
                         "mean_abs_dlogit": float(d.mean()), "ref_logit_std": float(ref.std()),
                         "top1_agreement": float((out.argmax(-1) == ref.argmax(-1)).float().mean())}
    if missed:
        R.W(f"forward: {len(missed)} quantized modules not mapped onto transformers parameters, e.g. {missed[:3]}")


def summarize(R, source, quant):
    print(f"quantized-load check of {quant}\n  against the BF16 source {source}")
    for k, v in R.info.items():
        print(f"  {k}: {json.dumps(v) if isinstance(v, dict) else v}")
    print("NMSE thresholds (hard fail / expected):", ", ".join(f"{f} {h:g} / ~{e:g}" for f, (h, e) in THRESHOLDS.items()))
    print("\n".join("  " + x for x in JUSTIFY))
    by = defaultdict(list)
    for r in R.rows:
        by[r["scheme"]].append(r)
    print(f"{'scheme':<12} {'tensors':>8} {'NMSE median':>12} {'NMSE max':>10}  worst tensor")
    for s, rs in sorted(by.items()):
        v, worst = [r["nmse"] for r in rs], max(rs, key=lambda r: r["nmse"] if r["nmse"] == r["nmse"] else math.inf)
        print(f"{s:<12} {len(rs):>8} {statistics.median(v):>12.3g} {max(v):>10.3g}  {worst['name']}")
    for title, xs in (("WARNINGS", R.warn), ("FAILURES", R.fail)):
        if xs:
            print(f"{title} ({len(xs)}):\n" + "\n".join("  " + x for x in xs[:60]) + (f"\n  ... {len(xs) - 60} more" if len(xs) > 60 else ""))
    print("RESULT:", "FAIL" if R.fail else "PASS")


# ------------------------------------------------------------ self-test
def self_test():
    def raises(f, *a):
        try:
            f(*a)
        except ValueError:
            return True
        return False
    assert [e2m1(c) for c in range(8)] == list(E2M1) and [e2m1(c) for c in range(9, 16)] == [-x for x in E2M1[1:]]
    assert unpack_fp4(bytes([0x21])) == [0.5, 1.0] and unpack_fp4(bytes([0x8F]))[0] == -6.0
    assert math.copysign(1, unpack_fp4(bytes([0x8F]))[1]) == -1  # code 0x8 is -0
    assert [e4m3(b) for b in (0x7E, 0x08, 0x01, 0x38, 0xB8, 0x77)] == [448, 2 ** -6, 2 ** -9, 1, -1, 240]
    assert math.isnan(e4m3(0x7F)) and math.isnan(e4m3(0xFF))
    # one NVFP4 block holding codes 0..15; block scale 448 (0x7E); tensor amax 6 -> CT global 2688/6 = 448
    packed, src = bytes([(2 * i) | ((2 * i + 1) << 4) for i in range(8)]), [e2m1(c) for c in range(16)]
    assert nmse([v * e4m3(0x7E) / 448.0 for v in unpack_fp4(packed)], src) == 0  # CT: / weight_global_scale
    assert nmse([v * e4m3(0x7E) * (6.0 / 2688) for v in unpack_fp4(packed)], src) < 1e-30  # ModelOpt: x weight_scale_2
    assert nmse([v * e4m3(0x7E) * 448.0 for v in unpack_fp4(packed)], src) > 1e9  # the wrong direction
    assert nmse(unpack_fp4(bytes([(b >> 4) | ((b & 15) << 4) for b in packed])), src) > THRESHOLDS["nvfp4"][0]
    assert block_scale_shape(300, 256, (128, 128)) == (3, 2)
    assert ct_ignored("model.layers.0.mlp.gate", ["re:.*mlp.gate$"])
    assert not ct_ignored("model.layers.0.mlp.gate_up_proj", ["re:.*mlp.gate$"])
    assert raises(ct_ignored, "model.layers.0.mlp.gate_up_proj", ["re:.*mlp.gate"])  # no $: gate_proj only
    assert not ct_ignored("model.layers.0.mlp.gate", ["mlp.gate"])  # bare names are exact in CT
    assert raises(ct_ignored, "model.layers.0.self_attn.qkv_proj", ["model.layers.0.self_attn.k_proj"])
    assert ct_target("model.layers.0.self_attn.qkv_proj", "QKVParallelLinear", ["Linear"]) == "Linear"
    assert ct_target("model.layers.0.mlp.gate_up_proj", "MergedColumnParallelLinear", ["re:.*down_proj"]) is None
    qkv = ["m.l.0.self_attn.q_proj", "m.l.0.self_attn.k_proj", "m.l.0.self_attn.v_proj"]
    assert ct_target("m.l.0.self_attn.qkv_proj", "X", qkv) == qkv[0] and ct_target("m.l.0.self_attn.qkv_proj", "X", qkv[:2]) is None
    assert mo_excluded("model.layers.0.mlp.gate_up_proj", ["mlp.gate"])  # ModelOpt substring trap
    assert mo_excluded("model.layers.0.mlp.experts", ["model.layers.0.mlp.experts.3.down_proj"])  # all experts
    assert mo_excluded("model.layers.1.self_attn.qkv_proj", ["model.layers.1.self_attn*"])
    assert pmap_fn("Qwen3_5ForConditionalGeneration")("model.language_model.layers.0.") == "language_model.model.layers.0."
    with tempfile.TemporaryDirectory() as d:
        h = json.dumps({"a": {"dtype": "U8", "shape": [2, 1], "data_offsets": [0, 2]}}).encode()
        with open(os.path.join(d, "x.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"\x01\x02")
        assert index_dir(d) == {"a": ("U8", (2, 1), "x.safetensors")}
    print("self-test: pure-Python parts passed")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("self-test: torch/transformers not installed, end-to-end part skipped")
        return 0
    return self_test_torch()


def self_test_torch():
    import torch
    import transformers as tf
    from safetensors.torch import save_file
    tmp, lut, models = tempfile.mkdtemp(prefix="cql-"), torch.tensor(E2M1), {}
    torch.manual_seed(0)

    def nvfp4(w, amax, mo=False):  # plain reference: global 2688/amax, E4M3 per-16 scales, nearest E2M1
        gs = 2688.0 / amax
        b = w.float().reshape(w.shape[0], -1, 16)
        bs = (b.abs().amax(-1) / 6 * gs).clamp(2 ** -9, 448).to(torch.float8_e4m3fn)
        x = b / (bs.float() / gs).unsqueeze(-1)
        c = ((x.abs().unsqueeze(-1) - lut).abs().argmin(-1) | ((x < 0).long() << 3)).reshape(w.shape[0], -1).to(torch.uint8)
        c = c[:, 0::2] | (c[:, 1::2] << 4)
        return {"weight": c, "weight_scale": bs, "weight_scale_2": torch.tensor(1 / gs), "input_scale": torch.tensor(0.01)} \
            if mo else {"weight_packed": c, "weight_scale": bs, "weight_global_scale": torch.tensor([gs]),
                        "input_global_scale": torch.tensor([100.0])}

    def fp8(strategy):
        def q(w, amax):
            f = w.float()
            if strategy == "block":
                s = f.reshape(f.shape[0] // 128, 128, -1, 128).abs().amax((1, 3)) / 448
                sb = s.repeat_interleave(128, 0).repeat_interleave(128, 1)
            else:
                sb = s = f.abs().amax(1, keepdim=True) / 448 if strategy == "channel" else f.abs().amax().reshape(1) / 448
            return {"weight": (f / sb).clamp(-448, 448).to(torch.float8_e4m3fn), "weight_scale": s.to(torch.bfloat16)}
        return q

    def build(src, name, quant, qcfg=None, hfq=None, mutate=None):
        st = Store(src)
        mods, other = enumerate_modules(st.idx)
        T, amax = {n: st.get(n) for n in other}, defaultdict(float)
        key = lambda m: (m.parent, SHARD_OF.get(m.leaf, m.leaf))  # fused shards and each expert's gate+up
        for m in mods:
            amax[key(m)] = max(amax[key(m)], float(src_rows(st, m, 0, m.out).float().abs().max()))
        for m in mods:
            w = src_rows(st, m, 0, m.out).clone()
            T.update({f"{m.hf}.{k}": v for k, v in (quant(w, amax[key(m)]) if m.kind in ("linear", "expert") else {"weight": w}).items()})
        (mutate or (lambda T: None))(T)
        d, c = os.path.join(tmp, name.replace(":", "-")), _json(os.path.join(src, "config.json"))
        os.makedirs(d)
        c.update({"quantization_config": qcfg} if qcfg else {})
        for fn, obj in (("config.json", c), ("hf_quant_config.json", hfq)):
            if obj:
                with open(os.path.join(d, fn), "w") as f:
                    json.dump(obj, f)
        save_file({k: v.contiguous() for k, v in T.items()}, os.path.join(d, "model.safetensors"))
        return d

    for arch, kw in (("Qwen3", {}), ("Qwen3Moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)),
                     ("Qwen3_5Moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                         shared_expert_intermediate_size=64, layer_types=["linear_attention", "full_attention"]))):
        try:
            cfg = (getattr(tf, arch + "TextConfig", None) or getattr(tf, arch + "Config"))(
                vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=4, head_dim=32, tie_word_embeddings=False, **kw)
            getattr(tf, arch + "ForCausalLM")(cfg).to(torch.bfloat16).save_pretrained(os.path.join(tmp, arch))
            models[arch] = os.path.join(tmp, arch)
        except Exception as e:  # an older transformers without the class or these fields
            print(f"self-test: no tiny {arch}ForCausalLM ({type(e).__name__}: {e}), skipped")
    if "Qwen3_5Moe" in models:  # the Qwen3.5/3.6-MoE hub layout: experts fused as [E, 2F, D] and [E, D, F]
        st, d = Store(models["Qwen3_5Moe"]), os.path.join(tmp, "Qwen3_5Moe-fused")
        T = {k: st.get(k) for k in st.idx}
        for pre in sorted({k.split(".experts.")[0] + ".experts" for k in T if ".experts." in k}):
            w, E = lambda e, p: T.pop(f"{pre}.{e}.{p}.weight"), len([k for k in T if k.startswith(pre) and "down" in k])
            T[pre + ".gate_up_proj"] = torch.stack([torch.cat([w(e, "gate_proj"), w(e, "up_proj")]) for e in range(E)])
            T[pre + ".down_proj"] = torch.stack([w(e, "down_proj") for e in range(E)])
        os.makedirs(d)
        save_file(T, os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(_json(os.path.join(models["Qwen3_5Moe"], "config.json")), f)
        models["Qwen3_5Moe-fused"] = d

    def ct(w, a, fmt, kv=None, ignore=("lm_head", "re:.*mlp.gate$")):
        return {"quant_method": "compressed-tensors", "format": fmt, "ignore": list(ignore), "kv_cache_scheme": kv,
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": w, "input_activations": a}}}
    fp4 = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True}
    f8 = lambda st, **k: dict({"num_bits": 8, "type": "float", "strategy": st, "symmetric": True}, **k)
    f8cfg = lambda st, kv=None, **k: ct(f8(st, **k), f8("token", dynamic=True), "float-quantized", kv)
    nvcfg, kvs = ct(fp4, dict(fp4, dynamic="local"), "nvfp4-pack-quantized"), f8("tensor", dynamic=False)
    mohfq = {"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16, "exclude_modules": ["lm_head"]}}
    nv, mo, q0 = nvfp4, lambda w, a: nvfp4(w, a, mo=True), "model.layers.0.self_attn.q_proj"
    kvt = lambda T: T.update({f"model.layers.{i}.self_attn.{x}_scale": torch.tensor([0.05]) for i in range(2) for x in "kv"})
    mut = lambda suffix, f: lambda T: T.update({k: f(v) for k, v in T.items() if k.endswith(suffix)})
    cases = [  # (model, name, quantizer, config.json quantization_config, hf_quant_config.json, mutation, must pass)
        ("Qwen3", "ct-nvfp4", nv, nvcfg, None, None, True), ("Qwen3", "modelopt-nvfp4", mo, None, mohfq, None, True),
        ("Qwen3", "ct-fp8-channel-kv", fp8("channel"), f8cfg("channel", kvs), None, kvt, True),
        ("Qwen3", "ct-fp8-tensor", fp8("tensor"), f8cfg("tensor"), None, None, True),
        ("Qwen3", "ct-fp8-block", fp8("block"), f8cfg("block", block_structure=[128, 128]), None, None, True),
        ("Qwen3Moe", "ct-nvfp4", nv, nvcfg, None, None, True), ("Qwen3_5Moe", "ct-nvfp4", nv, nvcfg, None, None, True),
        ("Qwen3_5Moe-fused", "ct-nvfp4", nv, nvcfg, None, None, True),
        ("Qwen3_5Moe-fused", "modelopt-nvfp4", mo, None, mohfq, None, True),
        ("Qwen3", "bad:nibbles-high-first", nv, nvcfg, None, mut("packed", lambda v: (v >> 4) | (v << 4)), False),
        ("Qwen3", "bad:global-scale-modelopt-direction", nv, nvcfg, None, mut("weight_global_scale", lambda v: 1 / v), False),
        ("Qwen3", "bad:bf16-weight-left", nv, nvcfg, None, lambda T: T.update({q0 + ".weight": T["lm_head.weight"][:128].clone()}), False),
        ("Qwen3", "bad:qkv-global-scales-differ", nv, nvcfg, None, mut("0.self_attn.q_proj.weight_global_scale", lambda v: 2 * v), False),
        ("Qwen3Moe", "bad:expert-gate-up-scales-differ", nv, nvcfg, None, mut("experts.1.up_proj.weight_global_scale", lambda v: 2 * v), False),
        ("Qwen3", "bad:kv-declared-no-scales", fp8("channel"), f8cfg("channel", kvs), None, None, False),
        ("Qwen3", "bad:k_proj-ignored-alone", fp8("channel"), dict(f8cfg("channel"), ignore=["lm_head", q0[:-6] + "k_proj"]), None, None, False)]
    wrong = 0
    for arch, name, quant, qcfg, hfq, mutate, want_ok in (c for c in cases if c[0] in models):
        R = check(models[arch], build(models[arch], arch + "-" + name, quant, qcfg, hfq, mutate), forward=want_ok)
        fw, med = R.info.get("forward"), statistics.median([r["nmse"] for r in R.rows]) if R.rows else math.nan
        good = (not R.fail) == want_ok and (not want_ok or isinstance(fw, dict) and fw["not_replaced"] == 0)
        wrong += not good
        fw = f"; forward max|dlogit| {fw['max_abs_dlogit']:.3g}, top-1 {fw['top1_agreement']:.2f}" if isinstance(fw, dict) else ""
        print(f"self-test {'ok ' if good else 'BAD'} {arch:<16} {name}: {len(R.fail)} failures, median NMSE {med:.3g}{fw}"
              + (f"\n    first failure: {R.fail[0]}" if R.fail else ""))
    print("self-test:", "end-to-end cases passed" if not wrong else f"{wrong} end-to-end cases WRONG")
    return 1 if wrong else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", help="BF16 source checkpoint directory")
    ap.add_argument("--quantized", help="quantized checkpoint directory")
    ap.add_argument("--json", help="write the full report here")
    ap.add_argument("--forward", action="store_true", help="also compare logits with transformers")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        sys.exit(self_test())
    if not (a.source and a.quantized):
        ap.error("--source and --quantized are required")
    R = Report()
    try:
        check(a.source, a.quantized, a.forward, R)
    except (ValueError, OSError, KeyError) as e:
        R.F(f"check aborted: {type(e).__name__}: {e}")
    summarize(R, a.source, a.quantized)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"source": a.source, "quantized": a.quantized, "ok": not R.fail, "info": R.info, "thresholds":
                       THRESHOLDS, "failures": R.fail, "warnings": R.warn, "tensors": R.rows}, f, indent=1)
    sys.exit(1 if R.fail else 0)


if __name__ == "__main__":
    main()
