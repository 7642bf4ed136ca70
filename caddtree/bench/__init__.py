"""`caddtree bench`: every method side by side on the paper's benchmarks, peers included.

For each prompt all methods run back to back (same prompt, same machine state), so slow drifts of a shared machine
hit every method alike. One JSON record per (dataset, method, prompt) is appended to DIR/records.jsonl as soon as it
finishes; a rerun with the same --out skips the (dataset, method, prompt id, config) keys already there. Prompts run
round-robin over the datasets (prompt 0 of each, then prompt 1, ...), so a partial run covers every dataset; `--part
I/K` runs every K-th of them in one of K processes (one per core), each appending to DIR/records.partIofK.jsonl.

Methods: `ar` (plain decoding, our engine), `ddtree:B` (fixed tree budget B, the --drafter), `caddtree` (cost-aware
budget, the --drafter); a prefix picks another drafter for the same two: `lookup-` (prompt lookup), `dflash-` (the
shipped DFlash drafter), `mix-` (DFlash + prompt lookup, `--drafter dflash+lookup`), e.g. `lookup-caddtree`;
`caddtree@cd0.5` / `@cd2` / `@cv0.5` / `@cv2` (cost model perturbed: C_d, or the C_v slope in n, scaled; --perturb),
`caddtree@nogate` (a two-stage drafter such as `mix` runs both stages every round: no `budget.DraftGate`),
`caddtree@predgate` (the gate learns from the policy's predicted gains instead of the realised ones),
`caddtree@cal` (Φ priced by the acceptance rates observed per predicted δ: `budget.PhiCalibration`),
`caddtree@spec` / `@specall` (`budget.SpeculationGate` under sampling / also greedily), `caddtree@nospec` (no
speculation gate), `@spec0` (the gate at margin 0, under sampling), `@flatmargin` (the gate's 5% margin whatever the
share of drafted rounds that verify a tree, as before results/bench-amd512-treemargin),
`caddtree@carry` / `@nocarry` (under sampling, one draft gate per sampling setting kept across generations: the
default since results/bench-amd512-native3 / a fresh gate per generation),
`caddtree@convex` / `@passes` / `@mono` (C_v refitted from the same measurements: convex (the paper's fit), convex
plus a jump per kernel pass (the default before results/bench-intel-monofit), monotone (the default)),
peers `hf` / `hf-lookup` (Hugging Face `generate`, plain / prompt_lookup_num_tokens=10) and `llamacpp`
(llama-cpp-python on the same GGUF, if importable).

Timing rule (every method): decode time per output token, prefill excluded. Our engine: the sum of round times over
the tokens emitted (the first round, which emits token 1 from the prompt's last token, included). HF `generate`
can only be timed end to end: t(generate N tokens) - t(generate 1 token), over N - 1 tokens; llama.cpp streams its
tokens: time from token 1 to token N, over N - 1 tokens.
τ: tokens emitted per round (bonus token counted).
"""
from caddtree.bench.records import identical_to_plain, load_records
from caddtree.bench.report import write_summary
from caddtree.bench.stats import paired_ratio, priced_ms_per_token, summarize

__all__ = ["identical_to_plain", "load_records", "paired_ratio", "priced_ms_per_token", "summarize", "write_summary"]
