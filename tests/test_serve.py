"""`caddtree serve` against the official openai client, on a live server on 127.0.0.1 (a tiny random Llama with a
character tokenizer, so it is fast; one integration test on SmolLM2).

What must hold: at temperature 0 every response, streamed or not, holds exactly the tokens plain decoding gives
the same prompt; stop strings cut the text before their first occurrence and are never sent; bad requests get a 400
with OpenAI's error body naming the field; under 16 concurrent clients every request completes correctly or gets a
clean 429, and nothing is mixed between clients; a client that disconnects mid-stream ends its generation at the
next round; SIGTERM lets a running stream finish and the process exit cleanly.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from caddtree.accept import SamplingParams
from caddtree.costmodel import fit_cost_model
from caddtree.drafter import PromptLookupDrafter
from caddtree.engine import Decoder
from caddtree.options import load_drafter_spec
from caddtree.serve.app import create_app
from caddtree.serve.text import StopText
from caddtree.serve.worker import Worker
from caddtree.target import load_target
from conftest import make_tiny_target

CHARS = " abcdefghijklmnopqrstuvwxyz.,!?:\n0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
VOCAB = 3 + len(CHARS)  # <s>, </s>, <unk>, then one token per character
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
MAX_POS = 256
COST = {"ns": [0, 1, 2, 4, 8, 16], "ctxs": [16, 1024], "draft_ms": [5.0, 6.0], "overhead_ms": 0.5,
        "verify_ms": [[10, 12, 13, 16, 22, 34], [12, 14, 15, 18, 24, 36]], "cheap_draft_ms": [0.2, 0.2]}


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = TEMPLATE
    return fast


def tiny_chat_target():
    target = make_tiny_target(seed=3, vocab=VOCAB, max_pos=MAX_POS, eos=1)
    target.tokenizer = char_tokenizer()
    return target


class Served:
    """A live server in this process (uvicorn in a thread, a free port)."""

    def __init__(self, decoder: Decoder, max_queue: int = 4):
        self.decoder, self.target = decoder, decoder.target
        self.worker = Worker(decoder, max_queue=max_queue)
        app = create_app(self.worker, "tiny", self.target.max_context)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                break
            time.sleep(0.05)
        self.client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=60)

    def close(self):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def served():
    target = tiny_chat_target()
    s = Served(Decoder(target, PromptLookupDrafter(VOCAB), method="ddtree", budget=4))
    yield s
    s.close()


def plain_text(target, ids, max_tokens: int) -> tuple[str, list[int]]:
    """What plain greedy decoding (a fresh decoder, `caddtree generate --method ar`) gives this prompt."""
    res = Decoder(target).generate(ids, max_tokens, SamplingParams())
    return target.detokenize(res.tokens), res.tokens


def chat_ids(target, content: str):
    return target.messages_ids([{"role": "user", "content": content}])


PROMPTS = ["hello there, how are you?", "count: 1 2 3 4 5 6 7", "the cat sat on the mat. the cat", "abc abc abc"]


@pytest.mark.parametrize("content", PROMPTS[:2])
def test_chat_equals_plain_decoding_streamed_and_not(served, content):
    want, tokens = plain_text(served.target, chat_ids(served.target, content), 40)
    msgs = [{"role": "user", "content": content}]
    r = served.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=40, temperature=0)
    assert r.choices[0].message.content == want and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == len(tokens)
    assert r.usage.prompt_tokens == len(chat_ids(served.target, content))
    assert r.choices[0].finish_reason == ("stop" if tokens[-1] == 1 else "length")
    ext = r.model_extra["caddtree"]
    assert ext["method"] == "ddtree" and ext["mean_accepted_length"] >= 1 and ext["ms_per_token"] > 0
    chunks = list(served.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=40, temperature=0,
                                                        stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == r.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(tokens)


def test_completions_equal_plain_decoding(served):
    target = served.target
    want, tokens = plain_text(target, target.as_ids(target.tokenizer("once upon a time")["input_ids"]), 30)
    r = served.client.completions.create(model="tiny", prompt="once upon a time", max_tokens=30, temperature=0)
    assert r.choices[0].text == want and r.usage.completion_tokens == len(tokens)
    streamed = served.client.completions.create(model="tiny", prompt="once upon a time", max_tokens=30,
                                                temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == want
    ids = target.tokenizer("once upon a time")["input_ids"]  # token ids as the prompt: the same answer
    assert served.client.completions.create(model="tiny", prompt=ids, max_tokens=30, temperature=0).choices[0].text \
        == want


def test_stop_strings_cut_before_the_first_occurrence_and_are_never_sent(served):
    content = PROMPTS[2]
    full, _ = plain_text(served.target, chat_ids(served.target, content), 60)
    assert len(full) > 12, full
    stops = [full[8:10], full[5:7] + "#never"]  # the second cannot occur: only the first cuts
    want = full[:full.find(stops[0])]
    msgs = [{"role": "user", "content": content}]
    r = served.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=60, temperature=0, stop=stops)
    assert r.choices[0].message.content == want and r.choices[0].finish_reason == "stop"
    chunks = served.client.chat.completions.create(model="tiny", messages=msgs, max_tokens=60, temperature=0,
                                                   stop=stops, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="ab\ufffdc", min_size=0, max_size=30), cuts=st.lists(st.integers(0, 30), max_size=6),
       stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=4), max_size=3))
def test_stop_text_sends_exactly_the_cut_text_whatever_the_rounds(text, cuts, stops):
    """A character per token, any split into rounds; a trailing U+FFFD (an incomplete byte sequence) is held back
    until a later round or the end decides it, never lost."""
    def decode(ids):
        return "".join(text[i] for i in ids)
    ids = list(range(len(text)))
    bounds = sorted({min(c, len(ids)) for c in cuts} | {0, len(ids)})
    st_ = StopText(decode, stops)
    sent = "".join(st_.push(ids[a:b]) for a, b in zip(bounds, bounds[1:])) + st_.finish()
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    assert sent == text[:cut]


BAD = [  # (endpoint, body or raw text, the field the error must name)
    ("chat/completions", "{not json", None),
    ("chat/completions", "[1, 2]", None),
    ("chat/completions", {"model": "tiny"}, "messages"),
    ("chat/completions", {"model": "tiny", "messages": "hi"}, "messages"),
    ("chat/completions", {"model": "tiny", "messages": []}, "messages"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
     "max_tokens"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "many"},
     "max_tokens"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 100000},
     "max_tokens"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": -1},
     "temperature"),
    ("chat/completions", '{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
     "temperature"),
    ("chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, "model"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x" * 400}]}, "messages"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p"),
    ("chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stop": 5}, "stop"),
    ("completions", {"model": "tiny"}, "prompt"),
    ("completions", {"model": "tiny", "prompt": ["a", "b"]}, "prompt"),
    ("completions", {"model": "tiny", "prompt": []}, "prompt"),
    ("completions", {"model": "tiny", "prompt": ""}, "prompt"),
    ("completions", {"model": "tiny", "prompt": [5, 9999]}, "prompt"),
    ("completions", {"model": "tiny", "prompt": "x", "max_tokens": -3}, "max_tokens"),
]


@pytest.mark.parametrize("endpoint, body, param", BAD)
def test_bad_requests_get_a_400_naming_the_field(served, endpoint, body, param):
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(f"{served.url}/v1/{endpoint}", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"] and "Traceback" not in err["message"]
    assert err["param"] == param, err


def test_models_and_health(served):
    assert [m.id for m in served.client.models.list().data] == ["tiny"]
    assert httpx.get(f"{served.url}/health").json()["status"] == "ok"


def test_sixteen_concurrent_clients_get_their_own_answers_or_a_clean_429(served):
    """16 clients x 4 requests (queue of 4): each request either returns exactly plain decoding's answer to its
    own prompt, or a 429 with OpenAI's error body; the server answers afterwards."""
    prompts = [f"{PROMPTS[i % 4]} {i}" for i in range(16)]
    want = {p: plain_text(served.target, chat_ids(served.target, p), 24)[0] for p in prompts}

    def client(p):
        out = []
        for j in range(4):
            try:
                kw = dict(model="tiny", messages=[{"role": "user", "content": p}], max_tokens=24, temperature=0)
                if j % 2:
                    got = "".join(c.choices[0].delta.content or "" for c in
                                  served.client.chat.completions.create(stream=True, **kw) if c.choices)
                else:
                    got = served.client.chat.completions.create(**kw).choices[0].message.content
                out.append(("ok", got == want[p]))
            except openai.RateLimitError as e:
                out.append(("429", e.body["message"] if isinstance(e.body, dict) else e.body))
        return out

    with ThreadPoolExecutor(16) as pool:
        results = [r for rs in pool.map(client, prompts) for r in rs]
    assert len(results) == 64
    oks = [ok for kind, ok in results if kind == "ok"]
    assert all(oks) and len(oks) >= 5, results  # at least the running one and the queue's worth complete
    assert all("busy" in str(msg) for kind, msg in results if kind == "429")
    assert httpx.get(f"{served.url}/health").json() == {"status": "ok", "running": False, "waiting": 0}


def test_a_client_that_disconnects_ends_its_generation(served, monkeypatch):
    """A slow forward (20 ms); the client reads the first text and closes: the decode stops at the next round
    (stop_reason 'stopped', far fewer than max_tokens), and the next request is served."""
    target, results = served.target, []
    fast_forward = target.forward

    def slow_forward(*a, **kw):
        time.sleep(0.02)
        return fast_forward(*a, **kw)
    monkeypatch.setattr(target, "forward", slow_forward)
    generate = served.decoder.generate
    monkeypatch.setattr(served.decoder, "generate", lambda *a, **kw: results.append(generate(*a, **kw)) or results[-1])
    body = {"model": "tiny", "messages": [{"role": "user", "content": "go on"}], "max_tokens": 200,
            "temperature": 1.0, "stream": True, "seed": 1}
    with httpx.stream("POST", f"{served.url}/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if '"content": "' in line and '"content": ""' not in line:
                break
    for _ in range(100):
        if results and not served.worker.busy:
            break
        time.sleep(0.05)
    assert results and results[-1].stop_reason == "stopped" and len(results[-1].tokens) < 100, results
    r = served.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=5, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")


SERVER_SCRIPT = """
import sys, time, uvicorn
sys.path.insert(0, {tests!r})
from test_serve import tiny_chat_target
from caddtree.engine import Decoder
from caddtree.serve.app import create_app, serve
from caddtree.serve.worker import Worker
target = tiny_chat_target()
forward = target.forward
target.forward = lambda *a, **kw: (time.sleep(0.01), forward(*a, **kw))[1]
worker = Worker(Decoder(target), start=False)  # as `caddtree serve`: decoding on the main thread
serve(worker, create_app(worker, "tiny", target.max_context), "127.0.0.1", {port}, graceful_timeout=20)
print("exited cleanly", file=sys.stderr)
"""


def test_sigterm_lets_a_running_stream_finish_then_exits(tmp_path):
    """`serve` as the CLI runs it (HTTP in a thread, decoding on the main thread): SIGTERM mid-stream, the stream
    still ends with its finish_reason and [DONE], and the process exits 0."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    script = SERVER_SCRIPT.format(tests=str(Path(__file__).parent), port=port)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60,
                "temperature": 0, "stream": True}
        lines = []
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line and not lines:
                    proc.send_signal(signal.SIGTERM)
                lines.append(line)
        assert [x for x in lines if x][-1] == "data: [DONE]", lines[-3:]
        finish = [json.loads(x[6:])["choices"][0]["finish_reason"] for x in lines
                  if x.startswith("data: {") and json.loads(x[6:]).get("choices")]
        assert finish[-1] in ("stop", "length")
        assert proc.wait(30) == 0
        err = proc.stderr.read()
        assert "Traceback" not in err and "exited cleanly" in err
    finally:
        proc.kill()


@pytest.mark.integration
def test_smollm2_chat_through_the_server_equals_generate():
    target = load_target("smollm2-135m-instruct", device="cpu")
    drafter = load_drafter_spec("auto", target)
    # a stand-in cost model: profiling this machine would take minutes, and the server's exactness does not
    # depend on the prices
    cost = fit_cost_model(COST, {"target_fingerprint": target.fingerprint})
    decoder = Decoder(target, drafter, method="caddtree", cost_model=cost)
    s = Served(decoder)
    try:
        content = "What is 12 * 13? Answer briefly."
        ids = chat_ids(target, content)
        res = Decoder(target).generate(ids, 48, SamplingParams())
        r = s.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": content}],
                                             max_tokens=48, temperature=0)
        assert r.choices[0].message.content == target.detokenize(res.tokens)
        assert r.usage.completion_tokens == len(res.tokens)
    finally:
        s.close()


def test_a_port_in_use_is_one_clear_error():
    from caddtree.errors import CaddtreeError
    from caddtree.serve.app import serve
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    worker = Worker(Decoder(tiny_chat_target()), start=False)
    try:
        with pytest.raises(CaddtreeError, match="cannot serve on 127.0.0.1:.*pass another --port"):
            serve(worker, create_app(worker, "tiny", MAX_POS), "127.0.0.1", busy.getsockname()[1])
    finally:
        busy.close()
