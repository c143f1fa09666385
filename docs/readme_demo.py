"""The README's expected demo output, taken from a demo run, never typed: the headline lines
``dhs demo`` prints (``dhs/demo_summary.py``: the lens finder's numbers, then, after the tables, the
hidden lenses the search recovered) stand in README.md between :data:`START` and :data:`END`.

    python docs/readme_demo.py DEMO_OUTPUT    rewrite the README's block from a demo's stdout

``make readme-demo`` runs the demo and this; ``tests/test_end_to_end.py`` compares the headline of
the demo it runs with the block (:func:`readme_headline`, :func:`demo_headline`), so the block
cannot drift from the code. The block records the machine it came from (:func:`machine`: torch's
build, the CPU instruction set its kernels use and its thread count): on such a machine the demo is
bitwise reproducible and the comparison is exact; elsewhere the numbers may differ in their last
digits (docs/results.md, "Reproducibility") and :func:`close` compares them within a stated
tolerance.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
START = "<!-- demo headline: written by `make readme-demo` from a demo run; tests/test_end_to_end.py checks it -->"
END = "<!-- end of the demo headline -->"
MACHINE = "<!-- machine: {} -->"
#: Tolerances of :func:`close`: a decimal number within DECIMAL_TOLERANCE, a count within
#: max(COUNT_TOLERANCE, COUNT_FRACTION of it).
DECIMAL_TOLERANCE, COUNT_TOLERANCE, COUNT_FRACTION = 0.05, 5, 0.1
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
#: The first line of the demo's closing summary (before the headline) and the hidden-lens line after the tables.
FINISHED, HIDDEN = "Demo finished in ", "Hidden-lens recovery: "


def demo_headline(stdout: str) -> list[str]:
    """The headline lines of a demo's stdout: the block after ``Demo finished in …`` up to its
    first blank line, and the hidden-lens recovery line. ValueError when the output has no summary."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(FINISHED)), None)
    if start is None:
        raise ValueError(f"no '{FINISHED}…' line: not the output of a finished dhs demo")
    body = lines[start + 1 :]
    while body and not body[0].strip():
        body = body[1:]
    headline = body[: next((i for i, line in enumerate(body) if not line.strip()), len(body))]
    return headline + [line for line in body if line.startswith(HIDDEN)]


def machine() -> str:
    """What the demo's numbers depend on besides the code: torch's build, the CPU instruction set
    its kernels dispatch to and its intra-op thread count (the training pins its own,
    ``darkhaloscope.training.loop.CPU_TRAINING_THREADS``; the other stages use this one)."""
    import torch

    return f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads"


def _block(readme: str) -> list[str]:
    if START not in readme or END not in readme:
        raise ValueError(f"README.md has no demo headline block ({START!r} … {END!r})")
    return readme.split(START, 1)[1].split(END, 1)[0].strip().splitlines()


def readme_machine(readme: str) -> str | None:
    """The machine the README's block came from (None when it does not say)."""
    prefix, suffix = MACHINE.split("{}")
    first = _block(readme)[0]
    return first[len(prefix) : -len(suffix)] if first.startswith(prefix) and first.endswith(suffix) else None


def readme_headline(readme: str) -> list[str]:
    """The lines of the README's block (inside its ``text`` fence)."""
    block = [line for line in _block(readme) if not line.startswith("<!--")]
    if len(block) < 2 or block[0] != "```text" or block[-1] != "```":
        raise ValueError("README.md's demo headline block is not one ```text fence")
    return block[1:-1]


def with_headline(readme: str, headline: list[str], on: str | None = None) -> str:
    """``readme`` with its block replaced by ``headline``, from the machine ``on``."""
    before, rest = readme.split(START, 1)
    after = rest.split(END, 1)[1]
    where = MACHINE.format(on) + "\n" if on else ""
    return before + START + "\n" + where + "```text\n" + "\n".join(headline) + "\n```\n" + END + after


def close(shown: list[str], printed: list[str]) -> list[str]:
    """The lines of ``printed`` that differ from ``shown`` beyond the tolerances: the same words, and
    each number within DECIMAL_TOLERANCE (a decimal) or max(COUNT_TOLERANCE, COUNT_FRACTION × it) (a
    count). Empty when they agree."""
    if len(shown) != len(printed):
        return [f"{len(printed)} lines where the README shows {len(shown)}"]
    out = []
    for a, b in zip(shown, printed):
        na, nb = _NUMBER.findall(a), _NUMBER.findall(b)
        same_words = _NUMBER.sub("#", a) == _NUMBER.sub("#", b) and len(na) == len(nb)
        if not same_words or not all(_near(x, y) for x, y in zip(na, nb)):
            out.append(f"{b!r} (README: {a!r})")
    return out


def _near(shown: str, printed: str) -> bool:
    a, b = float(shown), float(printed)
    if "." in shown or "." in printed:
        return abs(a - b) <= DECIMAL_TOLERANCE
    return abs(a - b) <= max(COUNT_TOLERANCE, COUNT_FRACTION * abs(a))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    headline = demo_headline(Path(argv[0]).read_text(encoding="utf-8"))
    README.write_text(with_headline(README.read_text(encoding="utf-8"), headline, machine()), encoding="utf-8")
    print(f"{README}: the demo headline block now holds the {len(headline)} lines of {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
