"""A C/C++/CUDA source without its comments, indentation and blank lines: the same tokens.

MLX's CUDA backend hashes every custom kernel's whole generated source each time it runs
the kernel (mlx/backend/cuda/custom_kernel.cpp `CustomKernel::eval_gpu`: the module name is
`std::hash` of the source), so at B=1, where the step is the host's time, the length of our
sources is host time: py-spy (session 32) put that hash at ~17 % of the engine thread's
step loop. The comments stay in the Python sources for readers; MLX gets the code. Newlines
stay (preprocessor lines end at them), string and character literals are copied as they
are, and a comment becomes one space where it separated two tokens.
"""
from __future__ import annotations


def minify_c(src: str) -> str:
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":                                # a literal, escapes included
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        else:
            out.append(c)
            i += 1
    kept: list[str] = []
    for line in "".join(out).split("\n"):
        line = line.strip()
        # a blank line ends a macro continued by a backslash: keep it there
        if line or (kept and kept[-1].endswith("\\")):
            kept.append(line)
    return "\n".join(kept) + ("\n" if src.endswith("\n") else "")
