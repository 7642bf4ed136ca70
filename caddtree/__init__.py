"""caddtree: lossless tree speculative decoding with a cost-aware tree budget (CaDDTree)."""
from caddtree.errors import CaddtreeError

__version__ = "0.1.0"
__all__ = ["CaddtreeError", "__version__"]
