"""How often the prompt lookup's top vote is right, by the length n of the matched suffix: along each greedy output
of `results/bench-amd-gatereset/` (its `ar` records), at every position, the longest suffix of prompt + output so far
(n = 3, 2, 1) seen earlier, its continuations' top vote at positions 0, 1, 2 against the tokens that followed
(position i counted only if positions < i were right). Writes per set: hit rate (trials) per n and position.

    python results/lookup-by-length/match_length.py > results/lookup-by-length/match_length.txt
"""
import numpy as np
from collections import defaultdict
from caddtree.bench import load_records
from caddtree.datasets import load_prompts
from caddtree.target import load_target
t = load_target("smollm2-135m-instruct")
recs = {(r["dataset"], str(r["prompt_id"])): r["tokens"] for r in load_records("results/bench-amd-gatereset") if r["method"] == "ar"}
for ds in ["math500", "gsm8k", "aime25", "humaneval", "mbpp", "livecodebench", "mt_bench", "alpaca"]:
    stats = defaultdict(lambda: np.zeros((2, 3)))  # n -> [pos0 trials/hits, pos1 ..]
    for it in load_prompts(ds, 12):
        out = recs[(ds, str(it["id"]))]
        seq = t.chat_ids(it["prompt"]).tolist()
        for k in range(len(out) - 3):
            ctx = seq + out[:k]
            look_n = None
            for n in range(3, 0, -1):
                if len(ctx) <= n: continue
                suf = ctx[-n:]
                found = [ctx[s + n:s + n + 3] for s in range(len(ctx) - n - 1, -1, -1) if ctx[s:s + n] == suf][:4]
                if found:
                    look_n = n; break
            if look_n is None: continue
            votes = [defaultdict(int) for _ in range(3)]
            for c in found:
                for i, tok in enumerate(c): votes[i][tok] += 1
            ok = True
            for i in range(3):
                if not votes[i] or not ok: break
                top = max(votes[i], key=votes[i].get)
                stats[look_n][0, i] += 1
                hit = top == out[k + i]
                stats[look_n][1, i] += hit
                ok = hit
    print(ds, "  ".join(f"n={n}: " + ", ".join(f"p{i} {s[1, i] / max(s[0, i], 1):.2f} ({int(s[0, i])})" for i in range(3)) for n, s in sorted(stats.items())))
