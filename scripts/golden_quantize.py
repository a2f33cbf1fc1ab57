#!/usr/bin/env python3
"""Golden outputs of the quantize package: compressed-tensors' and ModelOpt's
FP8 and NVFP4 weight quantization and activation scales, evaluated by torch.

What it does
    Builds seeded BF16 weight matrices (Python's random module, so the inputs
    do not depend on the torch version) that cover: Gaussian weights with heavy
    outlier columns; exact E4M3 and E2M1 rounding ties after scaling, and their
    BF16 neighbours; all-zero rows, all-zero groups of 16 and all-zero 128x128
    blocks; -0.0 and tiny negative values; tiny (subnormal BF16) magnitudes,
    whose FP8 scales underflow BF16 (CT's eps 2^-7) or whose NVFP4 block scales
    underflow E4M3 (CT's eps 0.125, ModelOpt's divide-by-zero codes); shapes
    with partial 128-row blocks and odd column counts; and a fused group of
    three matrices (q, k, v) sharing one NVFP4 global scale. It also builds a
    vector of BF16 absmax values for the global and activation scales.

    It then quantizes each matrix the way each tool does, re-implemented line
    by line in torch on CPU tensors (compressed-tensors and ModelOpt are not
    imported: the comments name the source file and function of every step),
    and writes the inputs and every output tensor, with the dtypes and shapes
    the tools store, to one safetensors file that quantize/math_golden_test.go
    compares with byte for byte.

    Sources: compressed-tensors 0.18.0 (commit ac8e2ba; identical for these
    formulas back to 0.13), llm-compressor commit ab1ba3e (observers),
    TensorRT-Model-Optimizer commit 5a4242f. "CT:" paths are under
    src/compressed_tensors/, "LLMC:" under src/llmcompressor/, "MO:" under
    modelopt/torch/.

Names in the file
    <case>.w                     BF16 [rows, cols]      an input matrix
    <case>.<scheme>.<tensor>     the tensors of one scheme, as a checkpoint names them:
        ct_fp8_channel  weight F8_E4M3 [r,c], weight_scale BF16 [r,1]      (CT FP8_DYNAMIC)
        ct_fp8_tensor   weight F8_E4M3 [r,c], weight_scale BF16 [1]        (CT FP8)
        ct_fp8_block    weight F8_E4M3 [r,c], weight_scale BF16 [ceil(r/128), c/128]  (CT FP8_BLOCK)
        mo_fp8_channel  weight F8_E4M3 [r,c], weight_scale F32 [r]         (ModelOpt FP8_PER_CHANNEL_PER_TOKEN)
        mo_fp8_tensor   weight F8_E4M3 [r,c], weight_scale F32 []          (ModelOpt FP8)
        ct_nvfp4        weight_packed U8 [r,c/2], weight_scale F8_E4M3 [r,c/16], weight_global_scale F32 [1]
        mo_nvfp4        weight U8 [r,c/2], weight_scale F8_E4M3 [r,c/16], weight_scale_2 F32 []
    amax.values                  BF16 [n]   absmax values, and per value:
    amax.ct_global_scale         F32 [n]    CT generate_gparam: weight_global_scale and input_global_scale
    amax.ct_fp8_act_scale        BF16 [n]   CT amax/448: FP8 input_scale, k_scale, v_scale
    amax.mo_weight_scale_2       F32 [n]    ModelOpt amax/(6*448) for weights
    amax.mo_fp8_input_scale      F32 [n]    ModelOpt FP8 input_scale
    amax.mo_nvfp4_input_scale    F32 [n]    ModelOpt NVFP4 input_scale
    amax.mo_kv_scale             F32 [n]    ModelOpt k_scale / v_scale
    The file's metadata holds "groups": a JSON object mapping each NVFP4 global
    scale group to its member cases (a case not listed is its own group).

Regenerate (python3 with torch 2.11 on CPU; the safetensors package if present,
else a built-in writer; run from the repository root):
    python3 scripts/golden_quantize.py --out testdata/golden/quantize/golden.safetensors

Check the script without torch (builds the inputs, writes nothing):
    python3 scripts/golden_quantize.py --dry-run

--emulate-fp8 replaces torch's float8_e4m3fn casts with an exact Python-side
emulation, for trying the script on an old torch that lacks the dtype; the
committed file never comes from it.
"""

import argparse
import json
import math
import os
import random
import struct
import sys

COMMAND = "python3 scripts/golden_quantize.py --out testdata/golden/quantize/golden.safetensors"
SEED = 20261130

FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max (CT: quant_args.py FP8_E4M3_DATA.max)
FP4_MAX = 6.0    # CT: quant_args.py FP4_E2M1_DATA.max


# ---------------------------------------------------------------------------
# Inputs, as lists of Python floats (exactly representable in BF16).

def bf16_round(x):
    """x rounded to the nearest BF16 value, ties to even (as torch's cast)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


def bf16_step(x, k):
    """The BF16 value k steps (codes) away from the BF16 value x > 0."""
    u = struct.unpack("<I", struct.pack("<f", x))[0] >> 16
    return struct.unpack("<f", struct.pack("<I", (u + k) << 16))[0]


def e4m3_value(code):
    """Value of E4M3FN magnitude code 0..126."""
    e, m = code >> 3, code & 7
    return math.ldexp(m, -9) if e == 0 else math.ldexp(8 + m, e - 10)


E4M3_VALUES = [e4m3_value(c) for c in range(127)]
E4M3_MIDS = [(a + b) / 2 for a, b in zip(E4M3_VALUES, E4M3_VALUES[1:])]
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
E2M1_MIDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


class Case:
    def __init__(self, name, rows, cols, values, schemes):
        assert len(values) == rows * cols
        self.name, self.rows, self.cols, self.values, self.schemes = name, rows, cols, values, schemes


def gaussian(rng, rows, cols, std, outlier_cols=3):
    x = [rng.gauss(0, std) for _ in range(rows * cols)]
    for _ in range(outlier_cols):
        c, k = rng.randrange(cols), rng.uniform(20, 300)
        for r in range(rows):
            x[r * cols + c] *= k
    return x


def e4m3_tie_row(cols, factor, rng):
    """A row whose absmax is 448*factor (column 0) and whose other elements
    are E4M3 values, midpoints between them (ties), and their BF16
    neighbours, all times factor (a power of two)."""
    row = [448.0 * factor]
    for c in range(1, cols):
        i = rng.randrange(len(E4M3_MIDS))
        v = E4M3_MIDS[i] if c % 3 else E4M3_VALUES[i]
        if c % 5 == 1 and v > 0:
            v = bf16_step(v, rng.choice((-1, 1)))
        row.append(-v * factor if c % 2 else v * factor)
    return row


def build_cases():
    rng = random.Random(SEED)
    ALL_FP8 = ["ct_fp8_channel", "ct_fp8_tensor", "mo_fp8_channel", "mo_fp8_tensor"]
    NV = ["ct_nvfp4", "mo_nvfp4"]
    cases = []

    # fp8: per-row magnitudes spread over 2^-12..2^4, outlier columns, special
    # rows, an odd column count.
    rows, cols = 40, 203
    x = []
    for r in range(rows):
        std = math.ldexp(1, rng.randrange(-12, 5))
        x += [rng.gauss(0, std) for _ in range(cols)]
    for _ in range(3):
        c, k = rng.randrange(cols), rng.uniform(20, 300)
        for r in range(rows):
            x[r * cols + c] *= k

    def set_row(r, vals):
        x[r * cols:(r + 1) * cols] = vals

    set_row(1, [0.0] * cols)
    set_row(2, [rng.gauss(0, 1) * 2.0 ** -130 for _ in range(cols)])          # subnormal BF16
    set_row(3, [rng.gauss(0, 1) * 2.0 ** -30 for _ in range(cols)])
    set_row(4, e4m3_tie_row(cols, 2.0 ** -3, rng))                             # exact ties
    set_row(5, e4m3_tie_row(cols, 1.0, rng))
    set_row(6, [math.copysign(0.0, rng.random() - 0.5) for _ in range(cols)])  # +0 and -0
    set_row(7, [rng.gauss(0, 1) * 2.0 ** rng.randrange(-20, 1) for _ in range(cols)])  # wide range in a row
    for i in range(0, rows * cols, 97):
        x[i] = -0.0
    cases.append(Case("fp8", rows, cols, x, ALL_FP8))

    # fp8ties: tensor absmax 448, so every scale is a power of two and the
    # midpoints stay ties under all four FP8 schemes and the block scheme.
    rows, cols = 8, 256
    x = []
    for r in range(rows):
        x += e4m3_tie_row(cols, 1.0 if r < 4 else 2.0 ** -2, rng)
    cases.append(Case("fp8ties", rows, cols, x, ALL_FP8 + ["ct_fp8_block"]))

    # blk: 300x384 = three row bands (the last partial, 44 rows) of three
    # 128-column blocks; block (0,1) zero, block (1,1) tiny (its scale
    # underflows BF16), block (2,2) small enough for a subnormal BF16 scale,
    # block (1,2) ties.
    rows, cols = 300, 384
    x = gaussian(rng, rows, cols, 0.02, outlier_cols=5)

    def fill_block(br, bc, f):
        for r in range(br * 128, min((br + 1) * 128, rows)):
            for c in range(bc * 128, (bc + 1) * 128):
                x[r * cols + c] = f(r, c)

    fill_block(0, 1, lambda r, c: 0.0)
    fill_block(1, 1, lambda r, c: rng.gauss(0, 1) * 2.0 ** -131)
    fill_block(2, 2, lambda r, c: rng.gauss(0, 1) * 2.0 ** -121)
    tie_rows = [e4m3_tie_row(128, 2.0 ** -4, rng) for _ in range(128)]
    fill_block(1, 2, lambda r, c: tie_rows[r - 128][c - 256])
    cases.append(Case("blk", rows, cols, x, ["ct_fp8_block", "ct_fp8_tensor"]))

    # zero: all zeros, some -0.0. ModelOpt's per-tensor FP8 and NVFP4 cannot
    # take it (their scale would be 0).
    rows, cols = 3, 128
    x = [(-0.0 if i % 3 == 0 else 0.0) for i in range(rows * cols)]
    cases.append(Case("zero", rows, cols, x, ["ct_fp8_channel", "ct_fp8_tensor", "ct_fp8_block",
                                              "mo_fp8_channel", "ct_nvfp4"]))

    # tiny: subnormal BF16 magnitudes (2^-133 .. 2^-127) and a few normals
    # near 2^-126: CT's global scale overflows to its fallback 1.
    rows, cols = 4, 256
    x = [rng.choice((-1, 1)) * math.ldexp(rng.randrange(1, 128), -133 - rng.randrange(0, 7))
         for _ in range(rows * cols)]
    for i in range(0, rows * cols, 37):
        x[i] = rng.choice((-1, 1)) * 2.0 ** -126 * rng.uniform(1, 2)
    cases.append(Case("tiny", rows, cols, x, ALL_FP8 + ["ct_fp8_block"] + NV))

    # nv_q, nv_k, nv_v: a fused group sharing one global scale (k holds the
    # largest absmax); zero rows, zero groups of 16, groups far below the
    # tensor's absmax (block scales that underflow E4M3), -0.0 and tiny
    # negatives.
    for name, rows, std in (("nv_q", 64, 0.02), ("nv_k", 32, 0.05), ("nv_v", 32, 0.01)):
        cols = 256
        x = gaussian(rng, rows, cols, std)
        for r in range(rows):
            for g in range(cols // 16):
                k = rng.randrange(30)
                if k == 0:
                    x[r * cols + 16 * g:r * cols + 16 * (g + 1)] = [0.0] * 16
                elif k == 1:
                    for i in range(16):
                        x[r * cols + 16 * g + i] *= 2.0 ** -rng.randrange(14, 26)
                elif k == 2:
                    x[r * cols + 16 * g + rng.randrange(16)] = -0.0
                elif k == 3:
                    x[r * cols + 16 * g + rng.randrange(16)] = -std * 2.0 ** -12
        x[3 * cols:4 * cols] = [0.0] * cols
        cases.append(Case(name, rows, cols, x, NV))

    # nvties: absmax 2688 so that CT's global scale and ModelOpt's
    # weight_scale_2 are 1; each group of 16 has absmax 6*2^p, so its scale is
    # 2^p and its elements are E2M1 values, midpoints (ties) and their BF16
    # neighbours, times 2^p.
    rows, cols = 8, 256
    x = []
    for g in range(rows * cols // 16):
        p = 2.0 ** (g % 14 - 8)
        grp = []
        for j in range(16):
            if j < 7:
                v = E2M1_MIDS[j]
            elif j < 14:
                v = bf16_step(E2M1_MIDS[j - 7], 1 if g % 2 else -1)
            elif j == 14:
                v = E2M1_VALUES[g % 8]
            else:
                v = 6.0
            grp.append(-v * p if (g + j) % 3 == 0 else v * p)
        x += grp
    x[0] = 2688.0
    cases.append(Case("nvties", rows, cols, x, NV))

    for c in cases:
        c.values = [bf16_round(v) for v in c.values]
    return cases


GROUPS = {"nv": ["nv_q", "nv_k", "nv_v"]}


def amax_values():
    """Every 8th positive finite BF16 code (subnormals included), plus a few
    round values."""
    codes = list(range(1, 0x7F80, 8)) + [0x3F80, 0x43E0, 0x4528, 0x0080]  # 1, 448, 2688, 2^-126
    return [struct.unpack("<f", struct.pack("<I", c << 16))[0] for c in sorted(set(codes))]


# ---------------------------------------------------------------------------
# FP8 casts: torch's, or an exact emulation for an old torch without the dtype.

class FP8:
    def __init__(self, torch, emulate):
        self.torch, self.emulate = torch, emulate
        if emulate:
            self.values = torch.tensor(E4M3_VALUES, dtype=torch.float32)
            self.mids = torch.tensor(E4M3_MIDS, dtype=torch.float32)
            self.signed = torch.tensor(E4M3_VALUES + [float("nan")] +
                                       [-v for v in E4M3_VALUES] + [float("nan")], dtype=torch.float32)

    def cast(self, x):
        """x.to(torch.float8_e4m3fn), as uint8 codes."""
        torch = self.torch
        if not self.emulate:
            return x.to(torch.float8_e4m3fn).view(torch.uint8)
        a = x.to(torch.float32).abs()
        c = torch.searchsorted(self.mids, a.contiguous())              # midpoints below |x|
        cc = c.clamp(max=len(E4M3_MIDS) - 1)
        tie = (self.mids[cc] == a) & (c % 2 == 1)                      # a tie goes to the even code
        code = (c + tie.to(c.dtype)).clamp(max=126)
        code = torch.where(a >= 464, torch.full_like(code, 127), code)  # NaN (never reached here)
        return (code | (torch.signbit(x.to(torch.float32)).to(code.dtype) << 7)).to(torch.uint8)

    def value(self, codes):
        """codes.view(torch.float8_e4m3fn).to(torch.float32)."""
        torch = self.torch
        if not self.emulate:
            return codes.view(torch.float8_e4m3fn).to(torch.float32)
        return self.signed[codes.long()]


# ---------------------------------------------------------------------------
# compressed-tensors (with llm-compressor's observers).

def ct_observe(torch, w, strategy):
    """LLMC observers/helpers.py _flatten_weight, then observers/min_max.py
    _get_min_max (memoryless_minmax): amin/amax over dims (0, -1)."""
    if strategy == "tensor":
        v = w.reshape((1, 1, -1))
    elif strategy == "channel":
        v = w.unsqueeze(-2).unsqueeze(0)
    elif strategy == "tensor_group":
        v = w.unflatten(-1, (-1, 16)).unsqueeze(0)
    elif strategy == "block":
        v = ct_pad_for_block(torch, w)
        rows, cols = v.shape
        v = v.reshape(rows // 128, 128, cols // 128, 128).transpose(1, 2).flatten(-2, -1).unsqueeze(0)
    return torch.amin(v, dim=(0, -1)), torch.amax(v, dim=(0, -1))


def ct_pad_for_block(torch, w):
    """CT quantization/utils/helpers.py maybe_pad_tensor_for_block_quant:
    zero-pad both dimensions to multiples of 128."""
    rows, cols = w.shape
    pr, pc = (128 - rows % 128) % 128, (128 - cols % 128) % 128
    if pr == 0 and pc == 0:
        return w
    return torch.nn.functional.pad(w, (0, pc, 0, pr), mode="constant", value=0)


def ct_calculate_range(torch, num_bits):
    """CT quantization/utils/helpers.py calculate_range (type float)."""
    mx = FP8_MAX if num_bits == 8 else FP4_MAX
    return torch.tensor(-mx), torch.tensor(mx)


def ct_calculate_qparams(torch, fp8, min_vals, max_vals, num_bits, fp8_scale_dtype, global_scale=None):
    """CT quantization/utils/helpers.py calculate_qparams, symmetric branch."""
    min_vals = torch.min(min_vals, torch.zeros_like(min_vals))
    max_vals = torch.max(max_vals, torch.zeros_like(max_vals))
    bit_min, bit_max = ct_calculate_range(torch, num_bits)
    bit_range = bit_max - bit_min
    max_val_pos = torch.max(torch.abs(min_vals), torch.abs(max_vals))
    scales = max_val_pos / (float(bit_range) / 2)
    if global_scale is not None:
        scales = global_scale * scales
    if fp8_scale_dtype:
        # round_to_quantized_type_dtype (quant_args.py): clamp to finfo, cast, cast back
        scales = fp8.value(fp8.cast(torch.clamp(scales, -FP8_MAX, FP8_MAX))).to(scales.dtype)
    # _get_dtype_eps: 0.125 for an FP8 scale dtype, else finfo(scales.dtype).eps
    eps = 0.125 if fp8_scale_dtype else torch.finfo(scales.dtype).eps
    scales = torch.where(scales == 0, torch.tensor(eps, dtype=scales.dtype), scales)
    if scales.ndim == 0:
        scales = scales.reshape(1)
    return scales


def ct_generate_gparam(torch, updated_min_val, updated_max_val):
    """CT quantization/utils/helpers.py generate_gparam (the final reshape([1])
    is left to the caller so that a vector of values can be evaluated)."""
    min_vals = torch.min(updated_min_val, torch.zeros_like(updated_min_val))
    max_vals = torch.max(updated_max_val, torch.zeros_like(updated_max_val))
    max_val_pos = torch.max(torch.abs(min_vals), torch.abs(max_vals))
    max_val_pos = torch.clamp(max_val_pos, min=torch.finfo(max_val_pos.dtype).tiny)
    global_scale = FP8_MAX * FP4_MAX / max_val_pos  # scale_data.max * quant_data.max / max_val_pos
    global_scale = torch.nan_to_num(global_scale, nan=1.0, posinf=1.0, neginf=1.0)
    return global_scale.to(torch.float32)


def ct_global_scale(torch, stats):
    """LLMC observers/base.py get_global_scale over a fused group's
    (min_vals, max_vals) statistics."""
    global_absmax = stats[0][1].max()
    for mn, mx in stats:
        global_absmax = torch.max(global_absmax, -mn.min())
        global_absmax = torch.max(global_absmax, mx.max())
    return ct_generate_gparam(torch, -global_absmax.reshape(1), global_absmax.reshape(1)).reshape([1])


def ct_quantize_fp8(torch, fp8, x, scale):
    """CT lifecycle/forward_helpers.py _quantize with dtype float8_e4m3fn and
    no zero point (llm-compressor's model_free_ptq path; see the Go test):
    x / scale, round_to_quantized_type_args (clamp, cast, cast back), .to(fp8)."""
    scaled = x / scale
    q_min, q_max = ct_calculate_range(torch, 8)
    rounded = torch.clamp(scaled, q_min, q_max)
    rounded = fp8.value(fp8.cast(rounded)).to(scaled.dtype)  # .to(FP8_E4M3_DATA.dtype).to(original_dtype)
    return fp8.cast(rounded)                                 # quantized_value.to(dtype)


def ct_cast_to_fp4(torch, x):
    """CT quantization/utils/fp4_utils.py cast_to_fp4 (the eager path every
    release runs)."""
    sign = torch.sign(x)
    x = torch.abs(x)
    x[(x >= 0.0) & (x <= 0.25)] = 0.0
    x[(x > 0.25) & (x < 0.75)] = 0.5
    x[(x >= 0.75) & (x <= 1.25)] = 1.0
    x[(x > 1.25) & (x < 1.75)] = 1.5
    x[(x >= 1.75) & (x <= 2.5)] = 2.0
    x[(x > 2.5) & (x < 3.5)] = 3.0
    x[(x >= 3.5) & (x <= 5.0)] = 4.0
    x[x > 5.0] = 6.0
    return x * sign


def ct_pack_fp4_to_uint8(torch, x):
    """CT compressors/nvfp4/helpers.py pack_fp4_to_uint8 (the CPU path)."""
    m, n = x.shape
    sign = torch.signbit(x).to(torch.uint8)
    x = (x * 2).to(torch.int8).abs_()
    indices = torch.zeros_like(x, dtype=torch.uint8)
    for v, i in ((1, 1), (2, 2), (3, 3), (4, 4), (6, 5), (8, 6)):
        indices[x == v] = i
    indices[x >= 12] = 7
    indices = indices | (sign << 3)
    indices = indices.reshape(-1, 2)
    packed = indices[:, 0] | (indices[:, 1] << 4)
    return packed.reshape(m, n // 2)


def ct_fp8(torch, fp8, w, strategy):
    """One CT FP8 weight: observer, calculate_qparams (BF16 scale, eps
    finfo(bf16).eps), the weight_scale parameter (observed dtype, BF16), and
    the naive compressor's quantize (compressors/naive_quantized/base.py)."""
    mn, mx = ct_observe(torch, w, strategy)
    scale = ct_calculate_qparams(torch, fp8, mn, mx, 8, False)
    scale = scale.to(torch.bfloat16)  # lifecycle/initialize.py: scale dtype = observed dtype
    if strategy != "block":
        return ct_quantize_fp8(torch, fp8, w, scale), scale
    # compress: pad, quantize -> _process_block (lifecycle/forward_helpers.py), cut.
    rows, cols = w.shape
    x = ct_pad_for_block(torch, w)
    pr, pc = x.shape
    xb = x.reshape(pr // 128, 128, pc // 128, 128).transpose(1, 2)
    q = ct_quantize_fp8(torch, fp8, xb, scale.unsqueeze(-1).unsqueeze(-1))
    q = q.transpose(1, 2).reshape(pr, pc)[:rows, :cols]
    return q.contiguous(), scale


def ct_nvfp4(torch, fp8, w, global_scale):
    """One CT NVFP4 weight: observer (tensor_group), calculate_qparams with
    the group's global scale and scale_dtype float8_e4m3fn, the BF16
    weight_scale parameter, and NVFP4PackedCompressor.compress
    (compressors/nvfp4/base.py): quantize -> _process_group -> _quantize ->
    cast_to_fp4, then pack_fp4_to_uint8; weight_scale.to(float8_e4m3fn)."""
    mn, mx = ct_observe(torch, w, "tensor_group")
    scale = ct_calculate_qparams(torch, fp8, mn, mx, 4, True, global_scale=global_scale)
    scale = scale.to(torch.bfloat16)  # the weight_scale parameter has the observed dtype
    # _process_group
    x = w.unflatten(-1, (w.shape[-1] // 16, 16))
    s = scale.unsqueeze(-1)
    # _quantize
    s = s / global_scale
    scaled = x / s
    q_min, q_max = ct_calculate_range(torch, 4)
    q = torch.clamp(scaled, q_min, q_max)       # round_to_quantized_type_args
    q = ct_cast_to_fp4(torch, q).to(scaled.dtype)
    q = q.flatten(start_dim=-2).to(w.dtype)     # _process_group: .to(output_dtype)
    return ct_pack_fp4_to_uint8(torch, q), fp8.cast(scale), global_scale


# ---------------------------------------------------------------------------
# ModelOpt.

def mo_reduce_amax(torch, x, axis=None):
    """MO quantization/utils.py reduce_amax (keepdims, squeeze_scalar)."""
    if axis is None:
        return torch.maximum(torch.abs(torch.max(x)), torch.abs(torch.min(x)))
    out = torch.maximum(torch.abs(torch.amax(x, dim=axis, keepdim=True)),
                        torch.abs(torch.amin(x, dim=axis, keepdim=True)))
    return out.squeeze() if out.numel() == 1 else out


def mo_export_amax(torch, amax, maxbound, per_channel):
    """MO quantization/nn/modules/tensor_quantizer.py export_amax."""
    amax = amax.clone()
    amax[amax == 0] = maxbound
    amax = torch.nan_to_num(amax, nan=maxbound)
    amax = amax.clamp(min=torch.finfo(amax.dtype).tiny, max=torch.finfo(amax.dtype).max)
    return amax.squeeze() if per_channel else amax.unsqueeze(0)


def mo_fp8_channel(torch, fp8, w):
    """FP8_PER_CHANNEL_PER_TOKEN: the weight quantizer's amax per output
    channel (axis 0), get_scaling_factor (export/quant_utils.py:
    export_amax().float() / maxbound), to_quantized_weight's
    (weight / weights_scaling_factor[:, None]).to(float8_e4m3fn)."""
    amax = mo_reduce_amax(torch, w, axis=-1)                        # calib/max.py collect, axis 0 kept
    scale = mo_export_amax(torch, amax, FP8_MAX, True).float() / FP8_MAX
    return fp8.cast(w / scale[:, None]), scale


def mo_fp8_tensor(torch, fp8, w):
    """FP8: per-tensor amax (0-dim), _export_quantized_weight's
    torch.tensor(amax.to(float32) / maxbound), and
    (weight / weights_scaling_factor).to(float8_e4m3fn) with the 0-dim
    float32 scale (the quotient stays BF16)."""
    amax = mo_reduce_amax(torch, w).to(torch.float32)
    scale = (amax / FP8_MAX).clone()
    return fp8.cast(w / scale), scale


def mo_cast_fp4(torch, weight):
    """MO quantization/qtensor/nvfp4_tensor.py NVFP4QTensor._cast_fp4."""
    e2m1_bounds = torch.tensor(E2M1_MIDS)
    sign_bit = (weight < 0).to(torch.uint8)
    weight_abs = weight.abs_()
    ord_ = torch.searchsorted(e2m1_bounds, weight_abs, out_int32=True).to(torch.uint8)
    odd_bounds = e2m1_bounds[[1, 3, 5]]
    equals_odd_bounds = torch.any(weight_abs.unsqueeze(-1) == odd_bounds, dim=-1).to(torch.uint8)
    return (sign_bit << 3) + ord_ + equals_odd_bounds


def mo_nvfp4(torch, fp8, w, weight_scale_2):
    """NVFP4: NVFP4QTensor.get_weights_scaling_factor and quantize
    (qtensor/nvfp4_tensor.py), block size 16, with the group's weight_scale_2
    (export/quant_utils.py get_weight_scaling_factor_2)."""
    per_block_amax = torch.maximum(                                   # utils.py reduce_block_amax
        w.unflatten(-1, (-1, 16)).amax(dim=-1).abs(), w.unflatten(-1, (-1, 16)).amin(dim=-1).abs()).float()
    per_block_scale = per_block_amax / (6.0 * weight_scale_2)
    per_block_scale[per_block_scale == 0] = 1.0
    per_block_scale = fp8.cast(per_block_scale)                       # .to(torch.float8_e4m3fn)
    x = w.view((*tuple(w.shape[:-1]), -1, 16))
    scaled = x / ((fp8.value(per_block_scale) * weight_scale_2).unsqueeze(-1))
    scaled = scaled.view(w.shape)
    q = mo_cast_fp4(torch, scaled)
    packed = (q[..., 1::2] << 4) | q[..., 0::2]
    return packed, per_block_scale, weight_scale_2


def mo_weight_scale_2(torch, amax):
    """get_weights_scaling_factor_2_from_quantizer: _amax.float() / (6 * 448)."""
    return amax.float() / (6.0 * 448.0)


# ---------------------------------------------------------------------------

def to_bytes(torch, t):
    t = t.contiguous().reshape(-1).view(torch.uint8)
    try:
        return t.numpy().tobytes()
    except Exception:  # no numpy
        return bytes(t.tolist())


def write_safetensors(path, entries, metadata):
    """A plain safetensors writer: (name, dtype, shape, bytes) in order."""
    header, offset = {"__metadata__": metadata}, 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, _, _, data in entries:
            f.write(data)


def torch_facts(torch):
    """A few torch behaviours the formulas rely on, printed for the record."""
    z = torch.tensor([-0.0])
    w, d = torch.arange(1, 1025, dtype=torch.float32).to(torch.bfloat16), torch.tensor(0.00310001, dtype=torch.float32)
    facts = {
        "sign(-0.0) is +0": not torch.signbit(torch.sign(z)).item(),
        "searchsorted(NaN) == 7": torch.searchsorted(torch.tensor(E2M1_MIDS), torch.tensor([float("nan")])).item() == 7,
        "bf16 / 0-dim f32 divides by the f32 value": torch.equal(
            (w / d).float(), (w.float() / d).to(torch.bfloat16).float()),
    }
    for k, v in facts.items():
        print("  torch %s: %s: %s" % (torch.__version__, k, v), file=sys.stderr)


def run(args):
    import torch
    torch_facts(torch)

    emulate = args.emulate_fp8 or not hasattr(torch, "float8_e4m3fn")
    if emulate and not args.emulate_fp8:
        raise SystemExit("torch %s has no float8_e4m3fn; pass --emulate-fp8 to try the script anyway" %
                         torch.__version__)
    fp8 = FP8(torch, emulate)
    cases = build_cases()
    bf16 = {c.name: torch.tensor(c.values, dtype=torch.float32).reshape(c.rows, c.cols).to(torch.bfloat16)
            for c in cases}
    out = []  # (name, dtype name, tensor); FP8 tensors are held as uint8 codes

    def put(name, dtype, t):
        out.append((name, dtype, t.detach().clone().contiguous()))  # no shared storage

    # Global scales: one per group (GROUPS), else per case.
    group_of = {m: g for g, ms in GROUPS.items() for m in ms}
    members = {}
    for c in cases:
        if any(s.endswith("nvfp4") for s in c.schemes):
            members.setdefault(group_of.get(c.name, c.name), []).append(c.name)
    ct_gs, mo_s2 = {}, {}
    for g, ms in members.items():
        stats = [ct_observe(torch, bf16[m], "tensor_group") for m in ms]
        ct_gs[g] = ct_global_scale(torch, stats)
        # MO export/quant_utils.py preprocess_linear_fusion: the members' amax set to their max.
        amax = mo_reduce_amax(torch, torch.stack([mo_reduce_amax(torch, bf16[m]) for m in ms]))
        mo_s2[g] = mo_weight_scale_2(torch, amax)

    for c in cases:
        w = bf16[c.name]
        put(c.name + ".w", "BF16", w)
        g = group_of.get(c.name, c.name)
        for s in c.schemes:
            p = "%s.%s." % (c.name, s)
            if s.startswith("ct_fp8_"):
                q, scale = ct_fp8(torch, fp8, w, s[len("ct_fp8_"):])
                put(p + "weight", "F8_E4M3", q)
                put(p + "weight_scale", "BF16", scale)
            elif s == "mo_fp8_channel":
                q, scale = mo_fp8_channel(torch, fp8, w)
                put(p + "weight", "F8_E4M3", q)
                put(p + "weight_scale", "F32", scale)
            elif s == "mo_fp8_tensor":
                q, scale = mo_fp8_tensor(torch, fp8, w)
                put(p + "weight", "F8_E4M3", q)
                put(p + "weight_scale", "F32", scale)
            elif s == "ct_nvfp4":
                packed, scale, gs = ct_nvfp4(torch, fp8, w, ct_gs[g])
                put(p + "weight_packed", "U8", packed)
                put(p + "weight_scale", "F8_E4M3", scale)
                put(p + "weight_global_scale", "F32", gs)
            elif s == "mo_nvfp4":
                packed, scale, s2 = mo_nvfp4(torch, fp8, w, mo_s2[g])
                put(p + "weight", "U8", packed)
                put(p + "weight_scale", "F8_E4M3", scale)
                put(p + "weight_scale_2", "F32", s2)
            else:
                raise SystemExit("unknown scheme " + s)

    # Scales from absmax values, one element per value (each formula is
    # elementwise, so a vector evaluates every value as a [1] tensor would).
    a = torch.tensor(amax_values(), dtype=torch.float32).to(torch.bfloat16)
    put("amax.values", "BF16", a)
    put("amax.ct_global_scale", "F32", ct_generate_gparam(torch, -a, a))
    # CT FP8 input / KV scales: calculate_qparams of a static tensor observer, BF16.
    put("amax.ct_fp8_act_scale", "BF16", ct_calculate_qparams(torch, fp8, -a, a, 8, False))
    put("amax.mo_weight_scale_2", "F32", mo_weight_scale_2(torch, a))
    # MO FP8 input_scale: _amax.to(float32), get_scaling_factor: export_amax().float() / maxbound.
    af = a.to(torch.float32)
    put("amax.mo_fp8_input_scale", "F32", mo_export_amax(torch, af, FP8_MAX, True).float() / FP8_MAX)
    # MO NVFP4 input_scale: NVFP4QTensor.get_activation_scaling_factor:
    # export_amax().float() / (maxbound * 448.0), maxbound 6.
    put("amax.mo_nvfp4_input_scale", "F32", mo_export_amax(torch, a, FP4_MAX, True).float() / (FP4_MAX * 448.0))
    # MO KV: postprocess_state_dict: _amax.float() / maxbound, clamp_(min=1.0) for FP8.
    put("amax.mo_kv_scale", "F32", (a.float() / FP8_MAX).clamp_(min=1.0))

    metadata = {
        "about": "Golden outputs for quantize/math_golden_test.go: CT and ModelOpt FP8/NVFP4 weight "
                 "quantization and scales, re-implemented in torch. Generated by "
                 "scripts/golden_quantize.py; do not edit.",
        "command": COMMAND,
        "torch_version": torch.__version__ + (" (FP8 casts emulated)" if emulate else ""),
        "seed": str(SEED),
        "groups": json.dumps(GROUPS, sort_keys=True),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    writer = "built-in writer"
    try:
        if emulate or args.builtin_writer:
            raise ImportError
        from safetensors.torch import save_file
        tensors = {}
        for name, dtype, t in out:
            t = t.contiguous()
            tensors[name] = t.view(torch.float8_e4m3fn) if dtype == "F8_E4M3" else t
        save_file(tensors, args.out, metadata=metadata)
        writer = "safetensors %s" % __import__("safetensors").__version__
    except ImportError:
        write_safetensors(args.out, [(n, d, tuple(t.shape), to_bytes(torch, t)) for n, d, t in out], metadata)
    size = os.path.getsize(args.out)
    print("wrote %s (%d bytes, %d tensors, %s, torch %s)" % (args.out, size, len(out), writer, torch.__version__),
          file=sys.stderr)
    if size > 2 << 20:
        print("warning: %s is over 2 MiB" % args.out, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="safetensors file to write, e.g. testdata/golden/quantize/golden.safetensors")
    ap.add_argument("--dry-run", action="store_true", help="build the inputs and check them; needs no torch")
    ap.add_argument("--emulate-fp8", action="store_true", help="emulate the float8_e4m3fn casts (old torch)")
    ap.add_argument("--builtin-writer", action="store_true", help="do not use the safetensors package")
    args = ap.parse_args()
    if args.dry_run:
        cases = build_cases()
        assert [c.values for c in cases] == [c.values for c in build_cases()], "inputs are not deterministic"
        for c in cases:
            assert all(bf16_round(v) == v or v != v for v in c.values)
        # the E4M3 table: 448 at 0x7E, 2^-9 at 0x01, midpoints exact
        assert E4M3_VALUES[0x7E] == 448 and E4M3_VALUES[1] == 2.0 ** -9 and E4M3_VALUES[8] == 2.0 ** -6
        assert all(bf16_round(m) == m for m in E4M3_MIDS)
        n = sum(c.rows * c.cols for c in cases)
        print("dry run: %d cases, %d weights, %d absmax values; nothing written" %
              (len(cases), n, len(amax_values())), file=sys.stderr)
        return
    if not args.out:
        ap.error("--out is required unless --dry-run is given")
    run(args)


if __name__ == "__main__":
    main()
