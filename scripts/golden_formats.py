#!/usr/bin/env python3
"""Golden bit patterns for lowbit's number formats, taken from torch's own casts.

What it does
    Builds a deterministic set of float32 inputs (as bit patterns) that hits
    every rounding decision the formats make: every representable value of
    FP8 E4M3FN, FP8 E5M2 and FP4 E2M1 and the exact midpoints between
    neighbours (and the float32s either side of each), BF16 and F16 midpoints
    across every exponent, subnormal ranges, the regions around 448/464/480
    (E4M3FN), 57344/61440/65536 (E5M2), 65504/65520 (F16) and 6 (E2M1),
    powers of two and their 1.5x midpoints (E8M0), ±0, ±inf, NaNs with and
    without payloads, and a few thousand seeded random values over wide
    magnitudes. It casts them on the CPU with torch to bfloat16, float16,
    float8_e4m3fn, float8_e5m2 and float8_e8m0fnu (when this torch has it),
    and writes the inputs and every output bit pattern to a JSON file that
    format/golden_test.go reads.

    FP4 E2M1: torch.float4_e2m1fn_x2 is a storage dtype for packed pairs and
    has no cast from float32, so the E2M1 column comes from an independent
    Python implementation: compressed-tensors' threshold chain
    (fp4_utils.py), evaluated on the exact float32 values (without the BF16
    pre-cast that compressed-tensors' torch path adds), with NaN mapped to
    zero of the input's sign as lowbit documents.

    It also evaluates compressed-tensors' NVFP4 and FP8 (per-channel)
    weight formulas with torch on seeded BF16 weights, written out line by
    line as CT writes them (generate_gparam, calculate_qparams, _quantize,
    cast_to_fp4), and stores the global scales, block scales and codes, so
    that format's block helpers stay bit-exact with CT, torch's rounding
    quirks included (2688 / amax is reciprocal-then-multiply in torch).
    compressed-tensors itself is not imported.

    The casts run on CPU tensors: no GPU is needed. The script also casts
    every input again one element at a time and with a shifted alignment, so
    that torch's scalar and vectorized CPU kernels both take part; it stops
    with an error if they disagree on any non-NaN input. (NaN outputs may
    legitimately differ in sign and payload between kernels; the Go test
    compares them as NaN codes.)

Regenerate (python3 with torch 2.11; run from the repository root):
    python3 scripts/golden_formats.py --out testdata/golden/formats.json

Check the input construction without torch (writes nothing):
    python3 scripts/golden_formats.py --dry-run
"""

import argparse
import json
import math
import os
import random
import struct
import sys

COMMAND = "python3 scripts/golden_formats.py --out testdata/golden/formats.json"
SEED = 20260117  # fixed: the input set must not change between runs
SIGN = 0x80000000
INF = 0x7F800000


def f2b(x):
    """Bit pattern of the float32 nearest to x (x must be in float32 range)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def b2f(u):
    """The float32 with bit pattern u, as a Python float (exact unless NaN)."""
    return struct.unpack("<f", struct.pack("<I", u))[0]


def is_nan_bits(u):
    return (u & ~SIGN & 0xFFFFFFFF) > INF


def minifloat_value(code, man_bits, bias):
    """Value of magnitude code in a format with man_bits mantissa bits and
    the given exponent bias (exponent field 0 = subnormals)."""
    e = code >> man_bits
    m = code & ((1 << man_bits) - 1)
    if e == 0:
        return math.ldexp(m, 1 - bias - man_bits)
    return math.ldexp((1 << man_bits) + m, e - bias - man_bits)


def build_inputs():
    """The deterministic, sorted, de-duplicated list of float32 bit patterns."""
    s = set()

    def add(u, both_signs=True):
        s.add(u & 0xFFFFFFFF)
        if both_signs:
            s.add((u ^ SIGN) & 0xFFFFFFFF)

    def add_around(u, both_signs=True):
        """u and its float32 neighbours, for non-negative finite u (or inf)."""
        for d in (-1, 0, 1):
            v = u + d
            if 0 <= v <= INF:
                add(v, both_signs)

    # Specials: zeros, infinities, NaNs (quiet, signalling, with payloads),
    # float32 subnormals and extremes.
    for u in (0, INF, 0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0x7FFFFFFF, 0x7FC00001,
              0x7F7FFFFF, 0x00800000, 0x00000001, 0x00000002, 0x003FFFFF,
              0x00400000, 0x00400001, 0x007FFFFF):
        add(u)

    # The 8- and 4-bit formats: every finite value, one step past the top
    # (480 for E4M3FN, whose code 0x7F is NaN; 2^16 for E5M2; 8 for E2M1),
    # every midpoint between neighbours, and the float32s either side.
    for man_bits, bias, max_mag, beyond in ((3, 7, 0x7E, 480.0), (2, 15, 0x7B, 65536.0),
                                             (1, 1, 7, 8.0)):
        vals = [minifloat_value(c, man_bits, bias) for c in range(max_mag + 1)] + [beyond]
        for v in vals:
            add_around(f2b(v))
        for a, b in zip(vals, vals[1:]):
            add_around(f2b((a + b) / 2))  # exact: one bit more than the format

    # Overflow regions, sampled more densely.
    for x in (449, 450, 456, 460, 463, 463.5, 464.5, 465, 470, 475, 479, 479.5, 481, 500, 512,
              1e4, 57000, 57345, 60000, 61439, 61441, 65000, 65504, 65519, 65520, 65521,
              70000, 1e5, 1e10, 1e30, 5.5, 5.9, 6.1, 7, 100):
        add_around(f2b(x))

    # BF16 (manBits 7 over float32's exponent range): for every exponent, the
    # midpoint after a code with even mantissa (0: tie rounds down), odd
    # mantissa (1: tie rounds up) and all-ones mantissa (0x7F: the carry into
    # the next exponent, or into Inf at the top), each with its neighbours.
    # The sign alternates with the exponent to keep the file small.
    for e in range(255):
        for m in (0x00, 0x01, 0x7F):
            u = (e << 23) | (m << 16) | 0x8000
            for v in (u - 1, u, u + 1):
                add(v | ((e & 1) << 31), both_signs=False)

    # F16: for every exponent field (0 = subnormals), the F16 values with
    # mantissa 0, 1, 0x200 and 0x3FF, the midpoint to the next value, and the
    # float32 neighbours of that midpoint.
    for e in range(31):
        for m in (0x000, 0x001, 0x200, 0x3FF):
            lo = minifloat_value((e << 10) | m, 10, 15)
            hi = minifloat_value((e << 10) | m, 10, 15) + math.ldexp(1, max(e, 1) - 25)
            add(f2b(lo))
            add_around(f2b((lo + hi) / 2))

    # E8M0: every power of two from 2^-127 to 2^127, the midpoint 1.5 * 2^k
    # where torch's cast switches exponent, and their neighbours. Positive
    # only (E8M0 ignores the sign); a few negatives come from other groups.
    for k in range(-127, 128):
        add_around(f2b(math.ldexp(1.0, k)), both_signs=False)
        if k < 127:
            add_around(f2b(math.ldexp(1.5, k)), both_signs=False)
    add_around(0x7F400000, both_signs=False)  # 1.5 * 2^127: torch gives NaN

    # Seeded random values: random sign and mantissa, exponents from 2^-40 to
    # 2^40, then fully random bit patterns (any exponent, NaNs included).
    rng = random.Random(SEED)
    for _ in range(3000):
        e = rng.randrange(127 - 40, 127 + 41)
        add((rng.getrandbits(1) << 31) | (e << 23) | rng.getrandbits(23), both_signs=False)
    for _ in range(1000):
        add(rng.getrandbits(32), both_signs=False)

    return sorted(s)


def e2m1_reference(u):
    """E2M1 code of the float32 with bits u: compressed-tensors' threshold
    chain on the exact value; NaN gives zero with the input's sign."""
    sign = 8 if u & SIGN else 0
    if is_nan_bits(u):
        return sign
    a = abs(b2f(u))  # exact, inf included
    code = 0
    if a > 0.25:
        code = 1
    if a >= 0.75:
        code = 2
    if a > 1.25:
        code = 3
    if a >= 1.75:
        code = 4
    if a > 2.5:
        code = 5
    if a >= 3.5:
        code = 6
    if a > 5.0:
        code = 7
    return sign | code


def torch_casts(inputs):
    """Cast the inputs with torch on the CPU; returns {name: (source, outputs)}."""
    import torch  # imported here so that --dry-run works without torch

    n = len(inputs)
    x = torch.frombuffer(bytearray(struct.pack("<%dI" % n, *inputs)), dtype=torch.float32).clone()
    nan_input = [is_nan_bits(u) for u in inputs]

    targets = [
        ("bf16", "bfloat16", torch.int16, 0xFFFF),
        ("f16", "float16", torch.int16, 0xFFFF),
        ("e4m3fn", "float8_e4m3fn", torch.uint8, 0xFF),
        ("e5m2", "float8_e5m2", torch.uint8, 0xFF),
        ("e8m0fnu", "float8_e8m0fnu", torch.uint8, 0xFF),
    ]
    results = {}
    for name, dtype_name, view_dtype, mask in targets:
        dtype = getattr(torch, dtype_name, None)
        if dtype is None:
            print("torch %s has no torch.%s: %s left out" % (torch.__version__, dtype_name, name),
                  file=sys.stderr)
            continue
        try:
            whole = [v & mask for v in x.to(dtype).view(view_dtype).tolist()]
        except (RuntimeError, TypeError) as err:
            print("torch.%s cast failed (%s): %s left out" % (dtype_name, err, name), file=sys.stderr)
            continue
        # The same inputs through other kernel paths: shifted by one element
        # (a different split between vector body and scalar tail) and one at a
        # time (the scalar path).
        shifted = [None] + [v & mask for v in x[1:].to(dtype).view(view_dtype).tolist()]
        single = [x[i:i + 1].to(dtype).view(view_dtype).item() & mask for i in range(n)]
        for i in range(n):
            if nan_input[i]:
                continue
            others = (single[i],) if i == 0 else (shifted[i], single[i])
            if any(o != whole[i] for o in others):
                raise SystemExit(
                    "torch.%s: kernels disagree on input %#010x: whole %#x, shifted %s, single %#x; "
                    "the golden file would be ambiguous" % (dtype_name, inputs[i], whole[i],
                                                            shifted[i], single[i]))
        source = "torch %s CPU tensor.to(torch.%s)" % (torch.__version__, dtype_name)
        results[name] = (source, whole)
    return torch.__version__, results


E2M1_TABLE = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def ct_formulas(torch):
    """compressed-tensors' NVFP4 and FP8-channel weight math on BF16 weights,
    evaluated by torch exactly as CT writes it (formats.md 1.a and 1.c)."""
    fp8 = torch.float8_e4m3fn
    fi = torch.finfo(fp8)
    tiny = torch.finfo(torch.float32).tiny

    def global_scale(amax):  # generate_gparam; amax >= 0, dtype bf16
        amax = torch.clamp(amax, min=tiny)
        return (448.0 * 6.0 / amax).to(torch.float32)  # Tensor.__rtruediv__

    # Global scale for a spread of BF16 amax values (every 5th positive
    # finite code), where torch's reciprocal-then-multiply matters.
    amax = torch.arange(1, 0x7F80, 5, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    gs_table = {"amax": [v & 0xFFFF for v in amax.view(torch.int16).tolist()],
                "outputs": [v & 0xFFFFFFFF for v in global_scale(amax).view(torch.int32).tolist()]}

    gen = torch.Generator().manual_seed(SEED)
    rows, cols = 16, 128
    trials = []
    for k in (-12, -6, -3, 0, 2, 5, 8, 12):
        w = torch.randn(rows, cols, generator=gen) * 2.0 ** k
        w[0] = 0                        # an all-zero row: the eps rules
        w[1, 5] *= 100                  # an outlier that dominates its row
        w[2] *= 2.0 ** -20              # a row far below the tensor's amax
        w = w.to(torch.bfloat16)
        zero = torch.zeros(1, dtype=w.dtype)

        # NVFP4 (tensor_group, group 16).
        gs = global_scale(torch.max(torch.abs(torch.min(w.min(), zero)), torch.abs(torch.max(w.max(), zero))))
        x = w.unflatten(-1, (cols // 16, 16))
        amin = torch.min(torch.amin(x, dim=-1), zero)
        amax_g = torch.max(torch.amax(x, dim=-1), zero)
        scales = torch.max(torch.abs(amin), torch.abs(amax_g)) / (float(6.0 - (-6.0)) / 2)  # bf16
        scales = gs * scales                                                              # float32
        scales = torch.clamp(scales, fi.min, fi.max).to(fp8).to(torch.float32)
        scales = torch.where(scales == 0, torch.tensor(0.125, dtype=scales.dtype), scales)
        scaled = x / (scales.unsqueeze(-1) / gs)                                          # _quantize
        # cast_to_fp4 thresholds the float32 quotient in released
        # compressed-tensors (ac8e2ba); a BF16 cast here existed only on a
        # development branch (#774-#820), so it is not reproduced.
        q = torch.clamp(scaled, -6.0, 6.0)                                                 # cast_to_fp4
        sign, a = torch.sign(q), torch.abs(q)
        v = torch.where(a <= 0.25, 0.0, torch.empty_like(q))
        for th, val, inclusive in ((0.25, 0.5, False), (0.75, 1.0, True), (1.25, 1.5, False),
                                   (1.75, 2.0, True), (2.5, 3.0, False), (3.5, 4.0, True),
                                   (5.0, 6.0, False)):
            v = torch.where(a >= th if inclusive else a > th, val, v)
        v = (v * sign).to(torch.float32).flatten().tolist()
        codes = [E2M1_TABLE.index(abs(e)) | (8 if e < 0 else 0) for e in v]  # -0 counts as +0

        # FP8 per channel: scale = amax_row / 448 in bf16, eps for 0; then
        # clamp(w / scale).to(fp8), the quotient being bf16.
        rmin = torch.min(torch.amin(w, dim=-1, keepdim=True), zero)
        rmax = torch.max(torch.amax(w, dim=-1, keepdim=True), zero)
        fs = torch.max(torch.abs(rmin), torch.abs(rmax)) / (float(448.0 - (-448.0)) / 2)
        fs = torch.where(fs == 0, torch.tensor(torch.finfo(fs.dtype).eps, dtype=fs.dtype), fs)
        f8 = torch.clamp(w / fs, fi.min, fi.max).to(fp8)

        trials.append({
            "w": [b & 0xFFFF for b in w.view(torch.int16).flatten().tolist()],
            "nvfp4_global_scale": gs.view(torch.int32).item() & 0xFFFFFFFF,
            "nvfp4_scales": scales.to(fp8).view(torch.uint8).flatten().tolist(),
            "nvfp4_codes": codes,
            "fp8_scales": [b & 0xFFFF for b in fs.view(torch.int16).flatten().tolist()],
            "fp8": f8.view(torch.uint8).flatten().tolist(),
        })
    return {
        "source": "compressed-tensors NVFP4 / FP8 channel formulas evaluated by torch %s on "
                  "CPU BF16 tensors (scripts/golden_formats.py ct_formulas)" % torch.__version__,
        "global_scale": gs_table,
        "rows": rows,
        "cols": cols,
        "trials": trials,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file to write, e.g. testdata/golden/formats.json")
    ap.add_argument("--dry-run", action="store_true",
                    help="build the inputs and the Python-side outputs, print a summary, write nothing")
    args = ap.parse_args()
    if not args.dry_run and not args.out:
        ap.error("--out is required unless --dry-run is given")

    inputs = build_inputs()
    e2m1 = [e2m1_reference(u) for u in inputs]
    n_nan = sum(is_nan_bits(u) for u in inputs)
    print("%d inputs (%d NaN), seed %d" % (len(inputs), n_nan, SEED), file=sys.stderr)

    if args.dry_run:
        # Spot checks of the Python reference, so a dry run tests something.
        for x, want in ((0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4), (3.5, 6), (5.0, 6),
                        (5.5, 7), (1e30, 7), (-0.0, 8), (-0.75, 10)):
            got = e2m1_reference(f2b(x))
            assert got == want, "e2m1_reference(%r) = %d, want %d" % (x, got, want)
        assert e2m1_reference(0x7FC00000) == 0 and e2m1_reference(0xFFC00000) == 8
        assert inputs == build_inputs(), "input construction is not deterministic"
        print("dry run: inputs and E2M1 reference OK; nothing written", file=sys.stderr)
        return

    torch_version, casts = torch_casts(inputs)
    formats = {name: {"source": source, "outputs": outs} for name, (source, outs) in casts.items()}
    formats["e2m1"] = {
        "source": "python threshold chain of compressed-tensors fp4_utils.py on exact float32 "
                  "values (torch has no float32 -> float4_e2m1fn_x2 cast); NaN -> signed zero",
        "outputs": e2m1,
    }
    import torch
    ct = ct_formulas(torch)
    doc = {
        "about": "Golden float32 -> narrow-format casts for lowbit's format package. inputs are "
                 "float32 bit patterns; each format's outputs are the bit patterns torch produced "
                 "for them, in the same order. Generated by scripts/golden_formats.py; do not edit.",
        "command": COMMAND,
        "torch_version": torch_version,
        "seed": SEED,
        "inputs": inputs,
        "formats": dict(sorted(formats.items())),
        "ct": ct,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(args.out)
    print("wrote %s (%d bytes): %s" % (args.out, size, ", ".join(sorted(formats))), file=sys.stderr)
    if size > 1 << 20:
        print("warning: %s is over 1 MiB" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
