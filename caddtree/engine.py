"""The decoding loop. One round:

    drafter marginals -> tree builder + budget policy -> tree verification -> acceptance -> cache compaction

(With CaDDTree and a two-stage drafter, the marginals come in two steps: the cheap stage's tree is priced first and
the costly stage runs only where `budget.DraftGate` expects it to raise the tokens per second; the gate learns that
from what both drafts would have had accepted, once the output has passed the round.)

Invariant between rounds: the target's KV cache holds every committed token except the last one (the root), which
is the first token of the next verify forward. Plain decoding is the same loop with an empty tree (`method="ar"`),
so the baseline runs the same forward, cache and precision as the speculative methods.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from caddtree import kernels
from caddtree.accept import SamplingParams, accept_walk, accepted_along, sample_token, target_choices
from caddtree.budget import DraftGate, PhiCalibration, SpeculationGate, TreeStop
from caddtree.drafter import Drafter, for_setting, setting_key
from caddtree.errors import CaddtreeError
from caddtree.target import Target
from caddtree.tree import SparseMarginals, Tree, build_tree
from caddtree.verify import commit_path, now, verify_tree

METHODS = ("ar", "ddtree", "caddtree")
GATES = ("realised", "predicted")
SAMPLING_ONLY = "sampling"  # a CaDDTree option's value meaning: on when the target samples (T > 0), off greedily
AUTO = "auto"  # the speculation gate's default: on where the drafter can skip a round (`Drafter.skip`), else off
# under sampling, the draft gate's longest re-check interval for a band that does not pay: each re-check is a DFlash
# forward (~45% of a plain step on the AMD), and at 64 the re-checks alone cost ~1.5% of T = 1's decode time there
GATE_BACKOFF = 256


@dataclass
class GateProbe:
    """A round where the gate ran the costly stage: what stage 1 alone would have verified, for pricing later."""
    band: int
    start: int          # index in the output of the round's first new token
    cheap: Tree         # the tree stage 1 alone chose
    cheap_ms: float     # its predicted round time (C_d of stage 1 + C_v)
    full: Tree          # the tree verified (both stages)
    full_ms: float


@dataclass
class RoundStats:
    ctx: int               # ℓ: tokens in the target's KV cache when the round starts
    tree_size: int         # n: draft nodes verified (the root not counted)
    accepted: int          # draft tokens accepted (the bonus token not counted)
    emitted: int           # tokens committed this round (accepted + bonus, cut at EOS / max_new_tokens)
    draft_ms: float = 0.0
    build_ms: float = 0.0  # tree build + budget choice
    verify_ms: float = 0.0
    compact_ms: float = 0.0  # the rest of the round: acceptance walk, cache compaction, the gate's learning
    predicted_phi: float | None = None  # CaDDTree: expected accepted draft tokens of the chosen tree
    predicted_ms: float | None = None   # CaDDTree: the cost model's round time for the chosen tree
    second_stage: bool | None = None    # two-stage drafter under CaDDTree: whether the gate ran the costly stage
    drafted: bool | None = None         # under CaDDTree's speculation gate: whether the round drafted at all

    @property
    def round_ms(self) -> float:
        return self.draft_ms + self.build_ms + self.verify_ms + self.compact_ms


@dataclass
class GenerationResult:
    prompt_len: int
    tokens: list[int]                   # generated token ids (prompt excluded)
    prefill_ms: float
    rounds: list[RoundStats] = field(default_factory=list)
    stop_reason: str = "length"         # "eos", "length", or "stopped" (the on_tokens callback ended it)

    @property
    def decode_ms(self) -> float:
        return sum(r.round_ms for r in self.rounds)

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * len(self.tokens) / max(self.decode_ms, 1e-9)

    @property
    def ms_per_token(self) -> float:
        return self.decode_ms / max(len(self.tokens), 1)

    @property
    def mean_accepted(self) -> float:
        """τ: tokens committed per round, the bonus token counted (as the field reports it)."""
        return len(self.tokens) / max(len(self.rounds), 1)

    def summary(self) -> dict:
        sizes = torch.tensor([float(r.tree_size) for r in self.rounds]) if self.rounds else torch.zeros(1)
        return {"new_tokens": len(self.tokens), "rounds": len(self.rounds), "tokens_per_s": self.tokens_per_s,
                "ms_per_token": self.ms_per_token, "tau": self.mean_accepted, "prefill_ms": self.prefill_ms,
                "tree_size_mean": sizes.mean().item(), "tree_size_std": sizes.std(unbiased=False).item(),
                "stop_reason": self.stop_reason}

    def round_records(self) -> list[dict]:
        return [asdict(r) for r in self.rounds]


class Decoder:
    """Generates with one target, one drafter and one budget policy.

    method "ar": plain decoding (no drafter); "ddtree": best-first tree of `budget` nodes every round;
    "caddtree": best-first tree of up to `cost_model.max_nodes` nodes, cut each round where expected tokens per
    second stop rising (`caddtree.budget.choose_tree_size`). With a two-stage drafter (`propose_cheap`) whose cost
    profile times its first stage, and `gate`, its costly stage runs only in rounds where `caddtree.budget.DraftGate`
    expects it to raise that rate.
    """

    def __init__(self, target: Target, drafter: Drafter | None = None, method: str = "ar", budget: int = 32,
                 cost_model=None, gate: bool | str = True, calibrate_phi: bool | str = SAMPLING_ONLY,
                 speculation_gate: bool | str = AUTO, carry_gate: bool | str = SAMPLING_ONLY,
                 speculation_margin: float = SpeculationGate.MARGIN,
                 speculation_tree_rate: float = SpeculationGate.TREE_RATE):
        if method not in METHODS:
            raise CaddtreeError(f"unknown method '{method}': choose one of {', '.join(METHODS)}")
        if method != "ar" and drafter is None:
            raise CaddtreeError(f"method '{method}' needs a drafter")
        if method == "ddtree" and budget < 1:
            raise CaddtreeError(f"tree budget must be >= 1, got {budget}")
        if method == "ddtree" and budget >= target.max_context:  # its attention mask alone: budget x (ℓ + budget)
            raise CaddtreeError(f"tree budget {budget} does not fit the target's context window "
                                f"({target.max_context} tokens): use a smaller budget")
        if method == "caddtree" and cost_model is None:
            raise CaddtreeError("method 'caddtree' needs a cost model (see `caddtree profile`)")
        made_for = (getattr(cost_model, "provenance", None) or {}).get("target_fingerprint")
        if method == "caddtree" and made_for and made_for != target.fingerprint:  # prices of another model's forward
            raise CaddtreeError(f"the cost model was profiled for target {made_for}, not {target.fingerprint}: "
                                f"profile this target (`caddtree profile`)")
        self.target, self.drafter, self.method = target, drafter, method
        self.budget = cost_model.max_nodes if method == "caddtree" else budget
        self.cost_model = cost_model
        # CaDDTree with a two-stage drafter also decides, per round, whether its costly stage is worth drafting
        two_stage = hasattr(drafter, "propose_cheap") and getattr(cost_model, "cheap_draft", None) is not None
        if gate is True:
            gate = "realised"
        if gate and gate not in GATES:
            raise CaddtreeError(f"unknown gate '{gate}': choose one of {', '.join(GATES)} (or no gate)")
        # "realised": the gate learns from the tokens each draft would actually have had accepted (known once the
        # output has passed the round); "predicted": from the policy's own expectation Φ of both drafts
        self.gate_mode = gate or None
        self.gate = DraftGate() if gate and method == "caddtree" and two_stage else None
        # carry_gate: the draft gate keeps what it learned across the generations of one sampling setting (one gate
        # per setting) instead of starting each text afresh. Default under sampling (SAMPLING_ONLY): there each round
        # gains little and a fresh gate's warm-up and re-checks paid the costly stage in 6-19% of rounds for ~nothing;
        # carried, in 1-2%, and CaDDTree was 2-7% faster on each of 8 sets at T = 0.7 and 1.0
        # (results/bench-amd512-native3, docs/sampling.md). Greedily off: gains depend on the text, and carrying them
        # made a run's speed depend on the prompts decoded before it
        self.carry_gate = carry_gate if self.gate is not None else False
        self.carried_gates: dict = {}  # sampling setting -> DraftGate (`drafter.for_setting`)
        if speculation_gate == AUTO:
            speculation_gate = hasattr(drafter, "skip")
        for name, value in (("calibrate_phi", calibrate_phi), ("speculation_gate", speculation_gate),
                            ("carry_gate", carry_gate)):
            if value not in (True, False, SAMPLING_ONLY):
                raise CaddtreeError(f"{name} must be True, False or '{SAMPLING_ONLY}', got {value!r}")
        # calibrate_phi: CaDDTree prices nodes by the acceptance rate observed for their predicted δ, one map per
        # draft stage and sampling setting. Default: under sampling only (greedily it brought Φ within 4-6% of the
        # accepted tokens without a measured speed difference, docs/design.md; sampled, docs/sampling.md)
        self.calibrate_phi = calibrate_phi if method == "caddtree" else False
        self.phi_cal: dict = {}  # sampling setting -> {stage: PhiCalibration} (`drafter.for_setting`)
        # speculation_gate: draft at all this round? (`budget.SpeculationGate`; on by default, greedy and sampled:
        # within 1% of drafting every round on the shipped model, and where drafting never pays it keeps CaDDTree
        # near plain decoding's speed instead of paying every round's draft: docs/sampling.md); it drafts while its
        # running gain is above -speculation_margin, scaled down where fewer than speculation_tree_rate of the drafted
        # rounds verify a tree (0: not scaled)
        self.speculation_gate = speculation_gate if method == "caddtree" else False
        if self.speculation_gate and not hasattr(drafter, "skip"):
            raise CaddtreeError("speculation_gate needs a drafter with skip(features) (caddtree.drafter.Drafter's)")
        self.spec_gate = (SpeculationGate(margin=speculation_margin, tree_rate=speculation_tree_rate)
                          if self.speculation_gate else None)
        self.sampling = SamplingParams()  # the current generation's

    def _sampled_option(self, value) -> bool:
        """Whether a True / False / SAMPLING_ONLY option is on for the current generation."""
        return value is True or (value == SAMPLING_ONLY and not self.sampling.greedy)

    def _phi_cal(self, stage: str) -> PhiCalibration | None:
        """The node-weight calibration of a draft stage under the current sampling setting (acceptance rates differ
        between greedy and sampled text, and between temperatures), or None where it is off."""
        if not self._sampled_option(self.calibrate_phi):
            return None
        cals = for_setting(self.phi_cal, self.sampling, dict)
        if stage not in cals:  # not setdefault: a PhiCalibration built every call costs ~20 µs, twice a round
            cals[stage] = PhiCalibration()
        return cals[stage]

    def _prompt_ids(self, prompt_ids) -> torch.Tensor:
        """Token ids as a list or a [P] / [1, P] integer tensor (a tokenizer's batch of one) -> [P] long on the
        target's device; a one-line CaddtreeError for anything the embedding lookup would fail on deep in torch."""
        ids = torch.as_tensor(prompt_ids)
        if ids.dim() == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.dim() != 1:
            raise CaddtreeError(f"prompt_ids must be one sequence of token ids ([P] or [1, P]), got shape "
                                f"{list(ids.shape)}: decode one prompt per call")
        if ids.numel() and (ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool):
            raise CaddtreeError(f"prompt_ids must be integer token ids, got {ids.dtype}")
        V = self.target.vocab_size
        bad = ids[(ids < 0) | (ids >= V)]
        if bad.numel():
            raise CaddtreeError(f"prompt_ids hold token id {int(bad[0])}, outside the target's vocabulary [0, {V}): "
                                f"tokenize with the target's tokenizer")
        return ids.long().to(self.target.device)

    def _check(self, prompt_len: int, max_new_tokens: int) -> None:
        if max_new_tokens <= 0:
            raise CaddtreeError(f"max_new_tokens must be > 0, got {max_new_tokens}")
        if prompt_len == 0:
            raise CaddtreeError("the prompt is empty")
        # the last new token is never fed back, so the forwards reach position prompt_len + max_new_tokens - 2
        limit = self.target.max_context
        if prompt_len > limit:
            raise CaddtreeError(f"the prompt has {prompt_len} tokens but the context window is {limit}: "
                                f"shorten the prompt")
        if prompt_len + max_new_tokens - 1 > limit:
            raise CaddtreeError(f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) exceeds the context "
                                f"window ({limit}) by more than the last token: lower --max-new-tokens to "
                                f"{limit - prompt_len + 1}")

    def _choose(self, log_probs: torch.Tensor, ctx: int, room: int, draft_ms: float | None = None,
                stage: str = "full"):
        """Marginals [L, V] -> (tree, BudgetChoice or None): the best-first tree, cut by CaDDTree's rule."""
        if self.method != "caddtree":
            return build_tree(log_probs[:room], self.budget), None  # depth capped: no token lands past the budget
        # built only as far as the choice can use it, which the stop rule keeps
        stop = TreeStop(self.cost_model, ctx, draft_ms=draft_ms, calibration=self._phi_cal(stage))
        sparse = isinstance(log_probs, SparseMarginals) and log_probs.shape[0] > 0
        if sparse and stop.plain_only(log_probs.top_log_prob(0)):
            # prompt lookup's best node cannot pay for its row: the choice is the plain step, known without a build
            # (most rounds of sampled text, where a round's fixed costs decide CaDDTree against plain decoding)
            return Tree.empty(), stop.choice()
        tree = build_tree(log_probs[:room], self.budget, stop)
        choice = stop.choice()
        return tree.prefix(choice.n), choice

    def _draft_tree(self, committed: list[int], feats, ctx: int, room: int, stats: RoundStats, start: float):
        """-> (tree to verify, GateProbe if the gate ran the costly stage and learns from realised gains, else None,
        the BudgetChoice of each draft priced: the first stage's, then both stages' where the costly one ran).
        `start`: the round's start time (the drafting laps count from it)."""
        device = self.target.device
        clock = [start]

        def lap() -> float:  # ms since the previous lap
            t = now(device)
            ms, clock[0] = 1000 * (t - clock[0]), t
            return ms

        probe, options = None, []
        if self.gate is None:
            log_probs = self.drafter.propose(torch.tensor(committed, device=device), feats)  # [L, V]
            stats.draft_ms = lap()
            tree, choice = self._choose(log_probs, ctx, room)
            stats.build_ms = lap()
        else:  # two-stage drafter: the first stage's tree, and the second stage only where the gate expects a gain
            log_probs = self.drafter.propose_cheap(committed)  # a list: most rounds need no [ℓ + 1] tensor
            stats.draft_ms = lap()
            tree, choice = self._choose(log_probs, ctx, room, draft_ms=self.cost_model.cheap_draft_ms(ctx),
                                        stage="cheap")
            options.append(choice)
            theta1 = choice.tokens_per_s
            band = self.gate.band(theta1, 1000.0 / choice.plain_ms)
            stats.build_ms = lap()
            stats.second_stage = self.gate.run_rest(band)
            if stats.second_stage:
                cheap, cheap_ms = tree, choice.predicted_ms
                log_probs = self.drafter.propose_rest(torch.tensor(committed, device=device), feats)
                stats.draft_ms += lap()
                tree, choice = self._choose(log_probs, ctx, room)
                if self.gate_mode == "predicted":
                    self.gate.observe(band, theta1, choice.tokens_per_s)
                else:
                    probe = GateProbe(band, -1, cheap, cheap_ms, tree, choice.predicted_ms)
                stats.build_ms += lap()
            else:
                self.drafter.skip_rest(feats)
                stats.draft_ms += lap()
        if choice is not None:
            stats.predicted_phi, stats.predicted_ms = float(choice.phi), float(choice.predicted_ms)
            if not options or options[-1] is not choice:
                options.append(choice)
        return tree, probe, options

    def _observe_realised(self, probes: list[GateProbe], output: list[int], final: bool) -> list[GateProbe]:
        """Feed the gate θ = (1 + accepted) / predicted round time of both drafts of each probe whose outcome the
        output now decides; return the probes still waiting for more output."""
        waiting = []
        for p in probes:
            text = output[p.start:]
            a_cheap = accepted_along(p.cheap.tokens, p.cheap.parents, p.cheap.depths, text, final)
            a_full = accepted_along(p.full.tokens, p.full.parents, p.full.depths, text, final)
            if a_cheap is None or a_full is None:
                waiting.append(p)
                continue
            self.gate.observe(p.band, 1000.0 * (1 + a_cheap) / p.cheap_ms, 1000.0 * (1 + a_full) / p.full_ms)
        return waiting

    @torch.inference_mode()
    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int = 128,
                 sampling: SamplingParams = SamplingParams(), seed: int | None = None,
                 on_tokens=None) -> GenerationResult:
        """prompt_ids [P] -> GenerationResult. `on_tokens(list[int])` is called with each round's new tokens; a true
        return value ends the generation after that round (stop_reason "stopped": a stop string, a cancelled
        request)."""
        target, device = self.target, self.target.device
        prompt_ids = self._prompt_ids(prompt_ids)  # [P]
        P = int(prompt_ids.shape[0])
        self._check(P, max_new_tokens)
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        self.sampling = sampling
        eos = target.eos_ids
        speculative = self.method != "ar"
        target.hidden_layers = list(self.drafter.target_layers) if speculative else []  # features the drafter reads

        t0 = now(device)
        cache = target.new_cache()
        feats = None
        if P > 1:
            _, feats = target.forward(prompt_ids[:-1], cache)  # everything but the root
        if speculative:
            if hasattr(self.drafter, "set_sampling"):  # Drafter's; a duck-typed drafter may not have it
                self.drafter.set_sampling(sampling)
            self.drafter.reset(prompt_ids)
        if self.gate is not None:
            if self._sampled_option(self.carry_gate):  # this setting's gate, as the previous generations left it
                self.gate = for_setting(self.carried_gates, sampling, DraftGate)
            else:  # what the costly stage gains is learned on this text, not carried over from another
                self.gate = DraftGate()
            self.gate.backoff = GATE_BACKOFF if not sampling.greedy else 0
        for cal in self.phi_cal.get(setting_key(sampling), {}).values():
            cal.start_text()
        spec_gate = self.spec_gate if self._sampled_option(self.speculation_gate) else None
        if spec_gate is not None:
            spec_gate.reset()
        result = GenerationResult(prompt_len=P, tokens=[], prefill_ms=1000 * (now(device) - t0))
        # the draw (sampling only): sample.cpp's one call on CPU (~0.2 ms a token where PyTorch's ops took ~0.7,
        # caches cold after a verify), else the reference `sample_token`; the same law (tests/test_sampling.py)
        draw = None if sampling.greedy else kernels.sampler(device) or sample_token
        # greedily, the same one-call idea for the argmax of each verified row (~0.13 ms of tensor ops a round, caches
        # cold after the verify, where sample.cpp's row_argmax takes ~0.02); the same choices (tests/test_kernels.py)
        argmax = kernels.greedy_chooser(device) if sampling.greedy else None

        committed = prompt_ids.tolist()
        probes: list[GateProbe] = []  # rounds whose stage-1-only outcome the gate learns once the output decides it
        while True:
            t0 = now(device)  # a round's parts add up to its whole time: decode time = the sum of the rounds'
            ctx = len(committed) - 1
            stats = RoundStats(ctx=ctx, tree_size=0, accepted=0, emitted=0)
            room = max_new_tokens - len(result.tokens) - 1  # draft depth that can still be emitted
            tree, probe, options = Tree.empty(), None, []
            if speculative and room > 0:
                stats.drafted = None if spec_gate is None else spec_gate.draft()
                if stats.drafted is not False:
                    tree, probe, options = self._draft_tree(committed, feats, ctx, room, stats, t0)
                else:  # a plain step: the drafter only keeps this round's features for its next proposal
                    self.drafter.skip(feats)
            t1 = now(device)
            logits, vfeats = verify_tree(target, cache, committed[-1], tree)
            t2 = now(device)
            if sampling.greedy:  # [n + 1]: one argmax call for every row
                choices = argmax(logits) if argmax is not None else target_choices(logits, sampling)
            else:  # one draw per row the walk reaches (1 + accepted), not per node

                def choices(row: int) -> int:
                    return draw(logits[row], sampling, gen)
            path, bonus = accept_walk(tree.tokens, tree.parents, choices)
            phi_cal = self._phi_cal("cheap" if stats.second_stage is False else "full")
            if phi_cal is not None and len(tree):
                phi_cal.observe(tree.log_weights, path)
            if spec_gate is not None and options:  # each draft at 1 + its (calibrated) Φ, priced without overhead
                cost = self.cost_model
                spec_gate.observe([(1.0 + c.phi, c.predicted_ms - cost.option_overhead_ms(c.n, ctx)) for c in options],
                                  cost.plain_step_ms(ctx), tree=len(tree) > 0)
            if len(tree):
                rows = commit_path(cache, ctx, path, device)
                feats = vfeats.index_select(0, rows) if vfeats is not None else None
            else:
                feats = vfeats
            new = tree.tokens[path].tolist() + [bonus]
            stats.verify_ms = 1000 * (t2 - t1)
            stats.tree_size, stats.accepted = len(tree), len(path)

            room = max_new_tokens - len(result.tokens)
            new = new[:room]
            hit = next((i for i, t in enumerate(new) if t in eos), None)
            if hit is not None:
                new = new[:hit + 1]
            stats.emitted = len(new)
            result.rounds.append(stats)
            if probe is not None:
                probe.start = len(result.tokens)
                probes.append(probe)
            result.tokens.extend(new)
            committed.extend(new)
            done = hit is not None or len(result.tokens) >= max_new_tokens
            if probes:
                probes = self._observe_realised(probes, result.tokens, final=done)
            stats.compact_ms = 1000 * (now(device) - t0) - stats.draft_ms - stats.build_ms - stats.verify_ms
            if spec_gate is not None and stats.drafted is not None:
                spec_gate.measure(stats.drafted, stats.build_ms + stats.compact_ms)
            stop = on_tokens(new) if on_tokens is not None else None  # the caller's time, not the decoder's
            if done or stop:
                result.stop_reason = "eos" if hit is not None else "length" if done else "stopped"
                return result
