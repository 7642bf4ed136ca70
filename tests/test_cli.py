"""The command line reports bad input as one line naming the problem and the fix, exit code 2."""
import pytest
import torch

from caddtree.cli import main, stream_printer

NO_SUCH_GPU = f"cuda:{torch.cuda.device_count() + 1000}"  # an index past every GPU here, on any machine


@pytest.mark.parametrize("argv, needle", [
    (["generate", "--temperature", "-1"], "temperature must be >= 0 and finite"),
    (["generate", "--top-p", "0"], "top_p must lie in (0, 1]"),
    (["generate", "--top-p", "1.5"], "top_p must lie in (0, 1]"),
    (["generate", "--method", "ddtree", "--budget", "0"], "--budget must be >= 1"),
    (["generate", "--max-new-tokens", "0"], "--max-new-tokens must be > 0"),
    (["generate", "--target", "./no/such/dir"], "model path not found"),
    (["generate", "--target", "/tmp/missing.gguf"], "GGUF file not found"),
    # a missing --cost-model is a wrong path (not silently profiled into), for generate and bench alike
    (["generate", "--cost-model", "/tmp/no/such/profile.json"], "no such file: create it with `caddtree profile"),
    (["bench", "--cost-model", "/tmp/no/such/profile.json", "--quick", "--out", "/tmp/no/such/run"],
     "no such file: create it with"),
    (["bench", "--num-prompts", "0", "--out", "/tmp/no/such/run"], "--num-prompts must be >= 1, got 0"),
    (["bench", "--max-new-tokens", "-5", "--out", "/tmp/no/such/run"], "--max-new-tokens must be >= 1, got -5"),
    (["bench", "--datasets", ",", "--out", "/tmp/no/such/run"], "--datasets names no dataset"),
    (["bench", "--report", "--out", "/tmp/no/such/run"], "holds no bench records: run the command without --report"),
    # train-drafter checks its options before loading the target and generating data
    (["train-drafter", "--lr", "-1", "--out", "/tmp/no/such/run"], "--lr must be > 0, got -1.0"),
    (["train-drafter", "--block-size", "1", "--out", "/tmp/no/such/run"], "--block-size must be >= 2, got 1"),
    (["train-drafter", "--steps", "0", "--out", "/tmp/no/such/run"], "--steps must be >= 1, got 0"),
    (["train-drafter", "--gamma", "0", "--out", "/tmp/no/such/run"], "--gamma must be > 0, got 0.0"),
    (["generate", "--threads", "-2"], "--threads must be >= 1, got -2"),
    (["generate", "--device", "tpu"], "device 'tpu' is not a torch device"),
    (["profile", "--device", NO_SUCH_GPU], f"device '{NO_SUCH_GPU}' is not available on this machine or torch build"),
    (["generate", "--device", "meta"], "device 'meta' is not available"),
    (["profile", "--threads", "0"], "--threads must be >= 1, got 0"),
    (["generate", "--json", "/tmp"], "--json /tmp is a directory: give a file path"),
    (["profile", "--out", "/tmp"], "--out /tmp is a directory"),
    (["eval-drafter", "--drafter", "dflash", "--n", "0"], "--n must be >= 1, got 0"),
    (["eval-drafter", "--drafter", "dflash", "--budgets", "8,x"], "--budgets must be node counts >= 1"),
    (["serve", "--port", "0"], "--port must lie in 1..65535, got 0"),
    (["serve", "--max-queue", "0"], "--max-queue must be >= 1, got 0"),
    (["bench", "--prompts", "/tmp/no/such/prompts.jsonl", "--out", "/tmp/no/such/run"], "no such file"),
    (["bench", "--prompts-name", "x", "--out", "/tmp/no/such/run"], "give the file too"),
])
def test_bad_input_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("caddtree: error:") and needle in err[0], err


def test_device_index_is_checked_against_the_gpus_present(monkeypatch):
    """With GPUs (two, faked here so the branch runs on any machine): an index below the count passes, one past it
    fails in one line, before any model is loaded."""
    from caddtree.errors import CaddtreeError
    from caddtree.target import check_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device("cuda")
    check_device("cuda:1")
    with pytest.raises(CaddtreeError, match="device 'cuda:2' is not available on this machine"):
        check_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(CaddtreeError, match="device 'cuda:0' is not available"):
        check_device("cuda:0")


@pytest.mark.parametrize("command", ["bench", "train-drafter"])
def test_output_dir_that_is_a_file_fails_first(command, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main([command, "--out", str(afile)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"caddtree: error: --out {afile} is a file: give a directory (it is created if missing)"]


def test_eval_drafter_names_a_bad_checkpoint(tmp_path):
    """eval-drafter reads a checkpoint after loading the target: its reader, on a tiny target."""
    bad = tmp_path / "step.pt"
    bad.write_text("not a checkpoint")
    from caddtree.errors import CaddtreeError
    from caddtree.train.evaluate import _drafter_from
    from conftest import make_tiny_target
    target = make_tiny_target(0)
    with pytest.raises(CaddtreeError, match="is not a caddtree training checkpoint"):
        _drafter_from(bad, target)
    with pytest.raises(CaddtreeError, match="not found"):
        _drafter_from(tmp_path / "gone.pt", target)


def test_file_system_errors_are_one_line(monkeypatch, capsys):
    def full_disk(args):
        raise OSError(28, "No space left on device", "/data/run/records.jsonl")
    monkeypatch.setattr("caddtree.cli.cmd_generate", full_disk)
    assert main(["generate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device: /data/run/records.jsonl" in err[0]


def test_drafter_specs():
    from caddtree.options import load_drafter_spec
    from caddtree.drafter import PromptLookupDrafter
    from caddtree.errors import CaddtreeError
    from conftest import make_tiny_target
    target = make_tiny_target(0)
    assert isinstance(load_drafter_spec("auto", target), PromptLookupDrafter)
    with pytest.raises(CaddtreeError, match="mix prompt lookup into a trained drafter"):
        load_drafter_spec("lookup+lookup", target)
    with pytest.raises(CaddtreeError, match="drafter not found: /no/such"):
        load_drafter_spec("/no/such+lookup", target)
    with pytest.raises(CaddtreeError, match="no shipped DFlash drafter"):
        load_drafter_spec("dflash+lookup", target)


class ByteTokenizer:
    """Token i = byte i: a character of several UTF-8 bytes spans tokens, as in byte-level BPE vocabularies."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def test_stream_printer_holds_a_split_character_until_it_is_complete(capsys):
    text = "café € ok"
    data = list(text.encode())
    rounds = [data[:4], data[4:5], data[5:8], data[8:9], data[9:]]  # splits é after its first byte, € inside
    printer = stream_printer(ByteTokenizer())
    chunks = []
    for new in rounds:
        printer(new)
        chunks.append(capsys.readouterr().out)
    printer.finish()
    chunks.append(capsys.readouterr().out)
    assert "\ufffd" not in "".join(chunks) and "".join(chunks) == text
    assert chunks[0] == "caf"  # the first byte of é is held, not printed as U+FFFD
