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
