"""A/B of batched greedy generation for drafter data: HF defaults (DynamicCache, transformers' SDPA, i.e. the
generator before e44ba12 for decode steps) vs greedy_batch (in-place cache, grouped attention). Same prompts."""
import sys, time, json
import torch
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
from caddtree.target import load_target
from caddtree.train import train_prompts, data_dir, greedy_batch
from caddtree.dflash import default_target_layers

target = load_target()
layers = default_target_layers(target.config.num_hidden_layers)
prompts = train_prompts(data_dir())
ps = prompts[-32:]  # the last 32 training prompts (not yet used for drafter data)
batch = [target.chat_ids(p).tolist() for _, p in ps]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 64
eos = sorted(target.eos_ids)
pad = target.tokenizer.pad_token_id

def old():
    P = max(len(x) for x in batch)
    inp = torch.full((len(batch), P), pad, dtype=torch.long); att = torch.zeros_like(inp)
    for b, x in enumerate(batch):
        inp[b, P - len(x):] = torch.tensor(x); att[b, P - len(x):] = 1
    target.model.set_attn_implementation("sdpa")
    with torch.inference_mode():
        g = target.model.generate(input_ids=inp, attention_mask=att, max_new_tokens=N, do_sample=False,
                                  output_hidden_states=True, return_dict_in_generate=True, pad_token_id=pad,
                                  eos_token_id=eos)
    target.model.set_attn_implementation("caddtree_sdpa")
    return g.sequences[:, P:]

def new():
    res, _ = greedy_batch(target, batch, layers, N)
    return res

rows = []
for rep in range(2):
    for name, fn in (("hf_default", old), ("greedy_batch", new)):
        t0 = time.perf_counter(); out = fn(); dt = time.perf_counter() - t0
        rows.append({"gen": name, "rep": rep, "sec": round(dt, 2), "row_steps_per_s": round(len(batch) * N / dt, 1)})
        print(json.dumps(rows[-1]), flush=True)
        if name == "hf_default": o = out
        else:
            same = sum(r[0] == [t for t in o[i].tolist()][:len(r[0])] for i, r in enumerate(out))
            print(f"identical responses: {same}/{len(out)}", flush=True)
