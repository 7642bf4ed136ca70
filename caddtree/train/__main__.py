"""`python -m caddtree.train train-drafter ...` / `eval-drafter ...`: the same as the `caddtree` subcommands."""
from caddtree.train.command import main

main()
