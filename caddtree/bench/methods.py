"""The methods `caddtree bench` runs: the method grammar (`ar`, `ddtree:B`, `caddtree`, drafter prefixes, `@` variants,
peers) and how each becomes a `Decoder`.
"""
from __future__ import annotations

import functools

import numpy as np

from caddtree.costmodel import CostModel, check_cost_model, fit_cost_model
from caddtree.engine import SAMPLING_ONLY, Decoder
from caddtree.errors import CaddtreeError
from caddtree.target import load_target


PERTURB = {"cd0.5": (0.5, 1.0), "cd2": (2.0, 1.0), "cv0.5": (1.0, 0.5), "cv2": (1.0, 2.0)}  # (C_d, C_v slope) scale


VARIANTS = {"nogate": {"gate": False}, "predgate": {"gate": "predicted"},  # method suffix -> Decoder(**kw)
            "cal": {"calibrate_phi": True}, "nocal": {"calibrate_phi": False},
            "spec": {"speculation_gate": SAMPLING_ONLY}, "specall": {"speculation_gate": True},  # specall: greedily too
            "nospec": {"speculation_gate": False},  # CaDDTree before the speculation gate was its default
            "spec0": {"speculation_gate": SAMPLING_ONLY, "speculation_margin": 0.0},  # drafts while the gain is > 0
            "carry": {"carry_gate": SAMPLING_ONLY}, "nocarry": {"carry_gate": False},
            "flatmargin": {"speculation_tree_rate": 0.0}}  # the speculation gate's margin before it shrank


def full_build_overhead(measurements: dict) -> dict:
    """Every round priced at the profile's bookkeeping of a full-budget tree, with no per-node part: the overhead as
    priced before it had one (`caddtree@fullbuild`, to compare the two in one run)."""
    if "overhead_by_size_ms" not in measurements:
        raise CaddtreeError("caddtree@fullbuild needs a profile that timed the overhead at two tree sizes: re-run "
                            "`caddtree profile`")
    return {"overhead_ms": [row[-1] for row in measurements["overhead_by_size_ms"]], "overhead_node_ms": 0.0}


REFITS = {"convex": {"row_group": 1, "verify_fit": "convex"}, "passes": {"verify_fit": "convex"},  # method suffix ->
          "mono": {"verify_fit": "monotone"},  # the cost model refitted from its measurements with these (a dict, or
          "fullbuild": full_build_overhead,   # a function of the measurements giving one)
          "oneover": {"overhead_plain_ms": None}}  # the plain step priced at a tree round's overhead, as before it


PEERS = ("hf", "hf-lookup", "llamacpp")


PLAIN_VARIANTS = ("ar-fp32",)  # plain decoding of the same target on its dequantised fp32 weights (GGUF targets)


@functools.cache
def variant_target(name: str, weights: str, unmodified: bool = False):
    """The target `name` loaded again with other weights; unmodified: the transformers model as loaded (PyTorch's
    linears, HF's forward), what the HF peers run."""
    if unmodified:
        return load_target(name, device="cpu", weights="fp32", pack=False, lean=False)
    return load_target(name, device="cpu", weights=weights)


DRAFTER_PREFIX = {"lookup": "lookup", "dflash": "dflash", "mix": "dflash+lookup"}  # method prefix -> --drafter spec


TREE_METHODS = ("ddtree",) + tuple(f"{p}-ddtree" for p in DRAFTER_PREFIX)


COST_METHODS = ("caddtree",) + tuple(f"{p}-caddtree" for p in DRAFTER_PREFIX)


def parse_methods(spec: str) -> list[str]:
    """'ar,ddtree:8,16,caddtree' -> ['ar', 'ddtree:8', 'ddtree:16', 'caddtree'] (bare numbers extend the last
    budgeted method)."""
    out, last = [], None
    for tok in (t.strip() for t in spec.split(",")):
        if not tok:
            continue
        if tok.isdigit():
            if last is None:
                raise CaddtreeError(f"--methods: budget {tok} follows no 'ddtree:B' method")
            tok = f"{last}:{tok}"
        name, _, arg = tok.partition(":")
        if name in TREE_METHODS:
            if not arg.isdigit() or int(arg) < 1:
                raise CaddtreeError(f"--methods: '{tok}' needs a budget >= 1, e.g. {name}:32")
            last = name
        else:
            last = None
            base, _, pert = name.partition("@")
            if arg or base not in ("ar", *PLAIN_VARIANTS, *COST_METHODS, *PEERS) or (pert and (
                    base not in COST_METHODS or pert not in (*PERTURB, *VARIANTS, *REFITS))):
                variants = ",".join((*PERTURB, *VARIANTS, *REFITS))
                raise CaddtreeError(f"--methods: unknown method '{tok}' (ar, ddtree:B, caddtree, "
                                    f"caddtree@{{{variants}}}, the same with a drafter prefix "
                                    f"{'-, '.join(DRAFTER_PREFIX)}- (e.g. lookup-caddtree), ar-fp32, hf, hf-lookup, "
                                    f"llamacpp)")
        if tok not in out:
            out.append(tok)
    if not out:
        raise CaddtreeError("--methods is empty")
    return out


def perturb_cost_model(model, draft_scale: float = 1.0, slope_scale: float = 1.0):
    """A copy of `model` with C_d (both stages' of a two-stage drafter) scaled and the C_v slope in n scaled above
    n = 1 (C_v(0), the plain step, and C_v(1) kept): C_v'(n) = C_v(1) + s (C_v(n) - C_v(1)), the kernel's pass
    jumps included; the ℓ-extrapolation slopes get the same map."""
    v = model.verify.copy()
    v[:, 1:] = v[:, 1:2] + slope_scale * (v[:, 1:] - v[:, 1:2])
    v = np.maximum.accumulate(v, axis=0)  # keep it non-decreasing in ℓ
    s = model.verify_slope.copy()
    s[1:] = s[1:2] + slope_scale * (s[1:] - s[1:2])
    cheap = None if model.cheap_draft is None else model.cheap_draft * draft_scale
    out = CostModel(model.ctxs, v, s, model.draft * draft_scale, model.overhead.copy(), cheap, model.row_group,
                    model.pass_ms * slope_scale, model.verify_fit, model.overhead_node, model.overhead_plain,
                    measurements=model.measurements,
                    provenance={**model.provenance, "perturbed": {"draft_scale": draft_scale,
                                                                  "verify_slope_scale": slope_scale}})
    problem = check_cost_model(out)
    if problem:
        raise CaddtreeError(f"perturbed cost model is invalid: {problem}")
    return out


def bench_decoder(method: str, target, drafter_for, cost_model_for):
    """-> (Decoder, drafter description) for one of our engine's methods."""
    if method == "ar":
        return Decoder(target), None
    if method == "ar-fp32":
        return Decoder(variant_target(target.name, "fp32") if target.weights == "native" else target), None
    name, _, arg = method.partition(":")
    base, _, pert = name.partition("@")
    prefix, _, _ = base.rpartition("-")
    drafter = drafter_for(DRAFTER_PREFIX[prefix] if prefix else "auto")
    desc = getattr(drafter, "name", None) or type(drafter).__name__
    if base in TREE_METHODS:
        return Decoder(target, drafter, "ddtree", budget=int(arg)), desc
    cm = cost_model_for(drafter)
    if pert in PERTURB:
        cm = perturb_cost_model(cm, *PERTURB[pert])
    if pert in REFITS:
        change = REFITS[pert](cm.measurements) if callable(REFITS[pert]) else REFITS[pert]
        cm = fit_cost_model({**cm.measurements, **change}, cm.provenance)
    return Decoder(target, drafter, "caddtree", cost_model=cm, **VARIANTS.get(pert, {})), desc


def method_family(method: str):
    """'ddtree:16' -> ('ddtree', 16); 'lookup-ddtree:8' -> ('lookup-ddtree', 8); others -> (method, None)."""
    name, _, arg = method.partition(":")
    return (name, int(arg)) if arg.isdigit() else (method, None)
