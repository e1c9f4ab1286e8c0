"""A seeded generator of hostile documents for the fuzz test: what an editor may send.

Each document starts from a real kernel file (the examples and test data: CUDA, Triton,
CUDA in Python strings, KernelBench) or from nothing, and is then broken in one way:
truncated, mutated, random bytes, nested deep, given bad pragmas or absurd launch specs,
odd Unicode and line breaks, or many kernels. The same seed gives the same documents.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CORPUS_FOLDERS = (TESTS.parent / "examples", TESTS / "data" / "discovery", TESTS / "data" / "measure")
# Pieces that make scanners change state: brackets, quotes, comments, raw strings, decorators.
TOKENS = (
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "<",
    ">",
    ";",
    ",",
    '"',
    "'",
    "\\",
    "/*",
    "*/",
    "//",
    "#",
    "\n",
    "\r",
    "\r\n",
    "\t",
    "__global__",
    "__device__",
    "template <typename T>",
    'extern "C" ',
    "<<<",
    ">>>",
    'R"(',
    ')"',
    'R"x(',
    "@triton.jit",
    "@triton.autotune(configs=[",
    "def ",
    "class ModelNew(nn.Module):",
    "class Model(",
    '"""',
    "'''",
    "load_inline(",
    "cuda_sources=",
    "RawKernel(",
    "get_inputs",
    "kernelcast:",
    "kernelcast: off",
    "kernelcast: launch",
    "reference=",
    "\x00",
    "\ufeff",
    "\u2028",
    "\u0301",
    "😀",
    "é",
    "\udcff",
    "\ud800",
    "𝔁",
    "\x1b[2J",
)
# Where a reference pragma may point: real files, files that cannot be read, paths that leave the workspace.
REFERENCE_TARGETS = (
    "matmul_naive.cu",
    "matmul_naive.cu::sgemm",
    "vector_add.cu::nope",
    "add_triton_baseline.py::add_kernel",
    "reference.py",
    "missing.cu",
    "bad_utf8.cu",
    "binary.cu",
    "too_big.cu",
    "folder",
    "folder/",
    "::other",
    "::",
    "../../../../etc/passwd",
    "/etc/passwd",
    "~/.ssh/id_rsa",
    '"with space.cu"',
    '"unterminated',
    "$(touch x).cu",
    "`id`.cu",
    "a;b.cu",
    "%s%n",
    "C:\\\\x.cu",
    "file:///etc/passwd",
    "x" * 5000,
    "",
)
BAD_PRAGMAS = (
    "kernelcast:",
    "kernelcast: off=yes",
    "kernelcast: reference",
    "kernelcast: reference= ",
    "kernelcast: frobnicate=1",
    "kernelcast: reference=a reference=b",
    "kernelcast: launch",
    "kernelcast: launch grid=",
    "kernelcast: inputs=(((",
    "kernelcast: " + "=" * 1000,
    "kernelcast: reference=\x00",
    "kernelcast:\treference=\t",
    "kernelcast: off off off",
)
# Launch-spec pieces no GPU can run, and expressions an evaluator must refuse without hanging.
ABSURD_VALUES = (
    "1<<40",
    "1<<62",
    "1<<63",
    "1<<1000",
    "-1",
    "0",
    "2**2**2**2**2",
    "9**9**9",
    "10**100",
    "(1<<31)",
    "cdiv(N, 0)",
    "N//0",
    "N % 0",
    "9" * 5000,
    "0x" + "f" * 100,
    "1.5",
    "1e300",
    "N",
    "M",
    "((((((((((1))))))))))",
    "(" * 5000 + "1" + ")" * 5000,
    "max()",
    "min(1)",
    "cdiv(1)",
    "__import__('os')",
    "open('/etc/passwd')",
    "N*N*N*N*N*N*N*N",
    "1_000_000_000_000",
    "'1'",
    "[1]",
    "x:f32[N]",
    "",
    "NaN",
    "inf",
)
KERNELBENCH_SOURCES = (
    'r"""__global__ void k(float* x) { x[0] = 1; }"""',
    'f"__global__ void {name}() {{}}"',
    "1 + 1",
    'open("/etc/passwd").read()',
    '"""__global__ void k(',
    "None",
)
KERNELBENCH_CALLS = ('name="m", cpp_sources="", cuda_sources=src', "cuda_sources=[src, src]", "*args", "**{}", "")
ARG_SHAPES = (
    "x:f32[N]",
    "y:f32[N]:out",
    "z:f16[N, N, N]",
    "w:i64[1<<40]",
    "q:bf16[-1]",
    "r:f33[4]",
    "s:f32[]",
    "t:i32=1<<40",
    "u:f32[N]:out:randint(5, 1)",
    "v:bool=maybe",
    "name with space:f32[4]",
    ":f32[4]",
    "x:f32[N]:out:out",
    "o:f32",
)


# A file of hundreds of kernels costs a hundred reference lookups and forecasts: a few of
# them make the point, a thousand would spend the suite's time budget on one shape.
MANY_KERNELS_SHARE = 0.2


@dataclass(frozen=True)
class Document:
    kind: str
    suffix: str
    text: str


def corpus() -> list[tuple[str, str]]:
    """(suffix, text) of every real kernel file the tests ship."""
    files = sorted(p for folder in CORPUS_FOLDERS for p in folder.iterdir() if p.suffix in (".cu", ".cuh", ".py"))
    return [(p.suffix, p.read_text()) for p in files]


class DocumentGenerator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.corpus = corpus()
        self.kinds = {
            "truncated": self.truncated,
            "mutated": self.mutated,
            "random bytes": self.random_bytes,
            "deep nesting": self.deep_nesting,
            "bad pragmas": self.bad_pragmas,
            "absurd launch spec": self.absurd_launch_spec,
            "kernelbench": self.kernelbench,
            "triton": self.triton,
            "unicode and line breaks": self.unicode_and_line_breaks,
            "many kernels": self.many_kernels,
        }

    def __iter__(self):
        kinds = list(self.kinds)
        weights = [MANY_KERNELS_SHARE if kind == "many kernels" else 1.0 for kind in kinds]
        while True:
            (kind,) = self.rng.choices(kinds, weights)
            suffix, text = self.kinds[kind]()
            yield Document(kind, suffix, text)

    # --- helpers -----------------------------------------------------------------------------

    def base(self) -> tuple[str, str]:
        return self.rng.choice(self.corpus)

    def odd_suffix(self, suffix: str) -> str:
        """Mostly the file's own suffix; sometimes another kernel suffix, or none kernelcast reads."""
        return suffix if self.rng.random() < 0.85 else self.rng.choice((".cu", ".cuh", ".py", ".CU", ".txt", ""))

    def insert(self, text: str, piece: str) -> str:
        at = self.rng.randrange(len(text) + 1)
        return text[:at] + piece + text[at:]

    def insert_line(self, text: str, line: str) -> str:
        lines = text.splitlines(keepends=True)
        lines.insert(self.rng.randrange(len(lines) + 1), line + "\n")
        return "".join(lines)

    def comment(self, suffix: str) -> str:
        return "# " if suffix == ".py" else self.rng.choice(("// ", "/* ", "//"))

    # --- kinds -------------------------------------------------------------------------------

    def truncated(self) -> tuple[str, str]:
        suffix, text = self.base()
        return self.odd_suffix(suffix), text[: self.rng.randrange(len(text) + 1)]

    def mutated(self) -> tuple[str, str]:
        suffix, text = self.base()
        for _ in range(self.rng.randint(1, 25)):
            choice = self.rng.random()
            if choice < 0.5:
                text = self.insert(text, self.rng.choice(TOKENS))
            elif choice < 0.8 and text:
                start = self.rng.randrange(len(text))
                text = text[:start] + text[start + self.rng.randint(1, 40) :]
            elif text:
                start = self.rng.randrange(len(text))
                text = self.insert(text, text[start : start + self.rng.randint(1, 200)])
        return self.odd_suffix(suffix), text

    def random_bytes(self) -> tuple[str, str]:
        data = self.rng.randbytes(self.rng.choice((1, 16, 512, 4096, 65536)))
        # As an editor that decoded invalid UTF-8 with surrogateescape would send it, or as Latin-1.
        text = data.decode("utf-8", "surrogateescape") if self.rng.random() < 0.5 else data.decode("latin-1")
        if self.rng.random() < 0.5:  # random bytes inside an otherwise real kernel
            suffix, base = self.base()
            return suffix, self.insert(base, text)
        return self.rng.choice((".cu", ".py", ".cuh")), text

    def deep_nesting(self) -> tuple[str, str]:
        depth = self.rng.choice((50, 200, 1000, 10_000, 100_000)) if self.rng.random() < 0.1 else self.rng.choice((50, 200, 1000))
        shape = self.rng.randrange(7)
        if shape == 0:
            body = "{" * depth + "x[0] = 1;" + "}" * self.rng.choice((depth, depth // 2, 0))
            return ".cu", f"__global__ void k(float* x) {body}\n"
        if shape == 1:
            return ".cu", f"__global__ void k(float* x) {{ x[0] = {'(' * depth}1{')' * depth}; }}\n"
        if shape == 2:
            return ".cu", "#if 1\n" * min(depth, 10_000) + "__global__ void k(float* x) { }\n" + "#endif\n" * min(depth, 10_000)
        if shape == 3:
            return ".py", f"import triton\n@triton.jit\ndef k(x):\n    y = {'[' * depth}{']' * depth}\n"
        if shape == 4:
            lines = [" " * i + f"def f{i}(x):" for i in range(min(depth, 300))]
            return ".py", "import triton\n" + "\n".join(lines) + "\n" + " " * len(lines) + "@triton.jit\n" + " " * len(
                lines
            ) + "def k(x): pass\n"
        if shape == 5:
            return ".cu", "template <" * min(depth, 5000) + "typename T" + ">" * min(depth, 5000) + " __global__ void k(T* x) {}\n"
        return (
            ".py",
            f"from torch.utils.cpp_extension import load_inline\n"
            f"src = {'(' * min(depth, 10_000)}'__global__ void k(float* x) {{}}'{')' * min(depth, 10_000)}\n"
            "m = load_inline(name='m', cpp_sources='', cuda_sources=src)\n",
        )

    def bad_pragmas(self) -> tuple[str, str]:
        suffix, text = self.base()
        for _ in range(self.rng.randint(1, 4)):
            if self.rng.random() < 0.5:
                pragma = f"kernelcast: reference={self.rng.choice(REFERENCE_TARGETS)}"
            else:
                pragma = self.rng.choice(BAD_PRAGMAS)
            text = self.insert_line(text, self.comment(suffix) + pragma)
        return suffix, text

    def absurd_launch_spec(self) -> tuple[str, str]:
        suffix, text = self.rng.choice([c for c in self.corpus if c[0] == ".cu"] + [c for c in self.corpus if "triton" in c[1]])
        value = lambda: self.rng.choice(ABSURD_VALUES)  # noqa: E731 - a short local draw
        args = ", ".join(self.rng.sample(ARG_SHAPES, self.rng.randint(0, 4)))
        keys = [
            f"grid=({value()}, {value()})",
            f"block=({value()})",
            f"smem={value()}",
            f"args=({args})",
            f"N={value()}",
            f"BLOCK={value()}",
            f"num_warps={value()}",
            f"kernel={self.rng.choice(('sgemm', 'nope', '', '😀'))}",
            f"{value()}={value()}",
        ]
        pragma = "kernelcast: launch " + " ".join(self.rng.sample(keys, self.rng.randint(1, len(keys))))
        return suffix, self.insert_line(text, self.comment(suffix) + pragma)

    def kernelbench(self) -> tuple[str, str]:
        pick = self.rng.choice
        parts = [
            "import torch\nimport torch.nn as nn\n",
            "from torch.utils.cpp_extension import load_inline\n",
            "src = " + pick(KERNELBENCH_SOURCES) + "\n",
            "m = load_inline(" + pick(KERNELBENCH_CALLS) + ")\n",
            "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
            "class ModelNew("
            + pick(("nn.Module", "Model", "", "object, metaclass=type"))
            + "):\n    def forward(self, x):\n        return m.k(x)\n",
            "def get_inputs():\n    return [torch.randn(" + pick(("16, 16", "1 << 40", "-1", "N", "")) + ")]\n",
            "def get_init_inputs():\n    return []\n",
        ]
        chosen = [part for part in parts if self.rng.random() < 0.8]
        if self.rng.random() < 0.2:
            self.rng.shuffle(chosen)
        return ".py", "".join(chosen)

    def triton(self) -> tuple[str, str]:
        signature = self.rng.choice(
            ("x_ptr, N, BLOCK: tl.constexpr", "*args, **kwargs", "", "x, /, y, *, z", "self", "x=lambda: 0", "a: 'tl.constexpr' = 1 << 40")
        )
        decorator = self.rng.choice(
            (
                "@triton.jit",
                "@triton.jit()",
                "@triton.jit(do_not_specialize=[0])",
                "@jit",
                "@triton.jit\n@triton.jit",
                "@triton.autotune(configs=[triton.Config({'BLOCK': 1 << 40}, num_warps=0)], key=[])\n@triton.jit",
                "@triton.autotune(configs=CONFIGS, key=['N'])\n@triton.jit",
                "@triton.autotune(configs=[], key=[])\n@triton.jit",
            )
        )
        body = self.rng.choice(("pass", "tl.store(x_ptr, 1)", "return", "yield 1", "x = ", "async with a: pass", "global tl"))
        prefix = self.rng.choice(("async def", "def", "class", "lambda"))
        text = (
            f"import triton\nimport triton.language as tl\n\n{decorator}\n"
            f"{prefix} kernel_{self.rng.randrange(100)}({signature}):\n    {body}\n"
        )
        return ".py", text

    def unicode_and_line_breaks(self) -> tuple[str, str]:
        suffix, text = self.base()
        shape = self.rng.randrange(6)
        if shape == 0:
            text = text.replace("\n", self.rng.choice(("\r\n", "\r", "\u2028", "\x0b", "\x0c", "\x1c", "\x85")))
        elif shape == 1:
            text = "\ufeff" + text
        elif shape == 2:  # names with characters outside the Basic Multilingual Plane (2 UTF-16 units each)
            text = text.replace("void ", "void 𝔨𝔢𝔯𝔫𝔢𝔩_", 1).replace("def ", "def ℌ𝔢𝔩𝔩𝔬_", 1)
        elif shape == 3:
            text = self.rng.choice(("", " ", "\n", "\r", "\r\n" * 1000, "\t" * 10000, "😀" * 10000, "\u0301" * 5000))
        elif shape == 4:
            text = text.replace(" ", "\u00a0").replace("(", "\uff08")
        else:
            text = "".join(ch + "\u0301" if ch.isalpha() and self.rng.random() < 0.1 else ch for ch in text)
        return suffix, text

    def many_kernels(self) -> tuple[str, str]:
        count = self.rng.choice((10, 100, 500, 2000))
        if self.rng.random() < 0.5:
            kernels = "".join(f"__global__ void k{i}(float* x) {{ x[{i}] = {i}; }}\n" for i in range(count))
            return ".cu", "// kernelcast: reference=matmul_naive.cu::sgemm\n" + kernels
        kernels = "".join(f"@triton.jit\ndef k{i}(x):\n    pass\n" for i in range(count))
        return ".py", "# kernelcast: reference=add_triton_baseline.py::add_kernel\nimport triton\n" + kernels
