"""The command line reports bad input as one line naming the problem and the fix, exit code 2."""
import pytest

from caddtree.cli import main


@pytest.mark.parametrize("argv, needle", [
    (["generate", "--temperature", "-1"], "temperature must be >= 0"),
    (["generate", "--top-p", "0"], "top_p must lie in (0, 1]"),
    (["generate", "--top-p", "1.5"], "top_p must lie in (0, 1]"),
    (["generate", "--method", "ddtree", "--budget", "0"], "--budget must be >= 1"),
    (["generate", "--max-new-tokens", "0"], "--max-new-tokens must be > 0"),
    (["generate", "--target", "./no/such/dir"], "model path not found"),
    (["generate", "--target", "/tmp/missing.gguf"], "GGUF file not found"),
])
def test_bad_input_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("caddtree: error:") and needle in err[0], err


def test_drafter_specs():
    from caddtree.cli import load_drafter_spec
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
