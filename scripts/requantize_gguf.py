"""Write a GGUF in another llama.cpp quantisation mix (e.g. Q4_K_M) from an existing one, with llama.cpp's own
quantiser (llama-cpp-python, the benchmark's llama.cpp peer), and print the tensor types it holds:

    python scripts/requantize_gguf.py SRC.gguf DST.gguf Q4_K_M

Requantising from a 4-bit file gives a file of that mix, not the model's best quantisation in it: what it is for is
exercising the block types of such files (docs/results.md, "K-quant files"). Tensors whose rows are not a multiple
of 256 weights get llama.cpp's fallbacks (Q5_0, Q5_1, Q8_0 for SmolLM2's 576-wide ones)."""
import collections
import ctypes
import sys

import llama_cpp
from gguf import GGUFReader

src, dst, mix = sys.argv[1:4]
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{mix}")
params.allow_requantize = True
if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)) != 0:
    sys.exit(f"llama.cpp could not quantise {src} to {mix}")
print(dict(collections.Counter(t.tensor_type.name for t in GGUFReader(dst).tensors)))
