"""Every ``DHS_`` variable is read in one place, ``resources/settings.py``: an AST scan of the product
finds any other read of the process environment (``os.environ[...]``, ``os.environ.get``,
``os.environ.setdefault``, ``os.getenv``) whose name is a ``DHS_`` one, or that it cannot resolve
to a name, and any ``os.environ`` given as a parameter's default (a read the caller cannot see).
The rest of the product takes its settings as values: the resources from ``resources/config.py``,
the Pipes workers from their context or the settings module, the science library as parameters."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_dependencies import PRODUCT, REPO

SETTINGS_MODULE = Path("resources/settings.py")
_READERS = {"get", "setdefault"}


def _product_files(root: Path) -> list[Path]:
    files = [p for package in PRODUCT for p in sorted((root / package).rglob("*.py"))]
    return files + [root / "definitions.py"]


def _strings(node: ast.AST) -> tuple[str, ...] | None:
    """The string(s) a constant expression holds: a str, or a tuple/list of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)):
        parts = [_strings(e) for e in node.elts]
        if all(p is not None for p in parts):
            return tuple(s for p in parts for s in p)
    return None


def _module_constants(files: list[Path]) -> dict[str, set[str]]:
    """Every module-level name bound to a string (or a tuple of strings) in the product, with the
    strings (a name bound in several modules keeps all of them: the scan errs towards a finding)."""
    out: dict[str, set[str]] = {}
    for path in files:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and (values := _strings(node.value)) is not None:
                    out.setdefault(target.id, set()).update(values)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for t, v in zip(target.elts, node.value.elts):
                        if isinstance(t, ast.Name) and (values := _strings(v)) is not None:
                            out.setdefault(t.id, set()).update(values)
    return out


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and _is_name(node.value, "os")) or _is_name(
        node, "environ"
    )


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


class _Scan(ast.NodeVisitor):
    def __init__(self, where: str, constants: dict[str, set[str]]):
        self.where, self.constants, self.loops, self.found = where, constants, {}, []

    def _names(self, key: ast.AST) -> set[str] | None:
        """The variable names ``key`` can be (None: the scan cannot tell)."""
        if (values := _strings(key)) is not None:
            return set(values)
        if isinstance(key, ast.JoinedStr) and key.values and isinstance(key.values[0], ast.Constant):
            return {str(key.values[0].value) + "…"}
        if isinstance(key, ast.Name):
            return self.loops.get(key.id) or self.constants.get(key.id)
        return None

    def _read(self, node: ast.AST, key: ast.AST | None) -> None:
        names = None if key is None else self._names(key)
        if names is None:
            self.found.append(f"{self.where}:{node.lineno}: reads an environment variable the scan cannot name")
        elif bad := sorted(n for n in names if n.startswith("DHS_")):
            self.found.append(f"{self.where}:{node.lineno}: reads {', '.join(bad)}")

    def _bind_loop(self, target: ast.AST, iterable: ast.AST) -> None:
        if isinstance(target, ast.Name):
            values = _strings(iterable)
            if values is None and isinstance(iterable, ast.Name):
                values = tuple(self.constants.get(iterable.id, ()))
            if values:
                self.loops[target.id] = set(values)

    def visit_For(self, node: ast.For) -> None:
        self._bind_loop(node.target, node.iter)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._bind_loop(node.target, node.iter)
        self.generic_visit(node)

    def _comprehension(self, node) -> None:
        for generator in node.generators:  # bind the loop names before the element reads them
            self.visit(generator)
        for child in ("elt", "key", "value"):
            if hasattr(node, child):
                self.visit(getattr(node, child))

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _READERS and _is_environ(func.value):
            self._read(node, node.args[0] if node.args else None)
        elif isinstance(func, ast.Attribute) and func.attr == "getenv" and _is_name(func.value, "os"):
            self._read(node, node.args[0] if node.args else None)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            self._read(node, node.slice)
        self.generic_visit(node)

    def _defaults(self, node) -> None:
        for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
            if _is_environ(default):
                self.found.append(f"{self.where}:{node.lineno}: os.environ as a parameter's default")
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _defaults


def environment_reads(root: Path) -> list[str]:
    """Every read of a ``DHS_`` variable (or of an unnamed one) outside the settings module, as
    ``path:line: what``, in the product under ``root``."""
    files = _product_files(root)
    constants = _module_constants(files)
    found: list[str] = []
    for path in files:
        rel = path.relative_to(root)
        if rel == SETTINGS_MODULE:
            continue
        scan = _Scan(str(rel), constants)
        scan.visit(ast.parse(path.read_text(encoding="utf-8")))
        found += scan.found
    return found


def test_only_the_settings_module_reads_dhs_variables():
    assert environment_reads(REPO) == []


def test_the_scan_finds_each_kind_of_read(tmp_path):
    package = tmp_path / PRODUCT[0]
    package.mkdir()
    (tmp_path / "definitions.py").write_text("")
    (package / "reads.py").write_text(
        "import os\n"
        "from os import environ\n"
        'NAME, OTHER = "DHS_A", "HOME"\n'
        'SECRETS = ("AWS_SECRET_ACCESS_KEY", "DHS_B")\n'
        'a = os.environ.get("DHS_C", "x")\n'
        "b = os.environ[NAME]\n"
        'c = os.getenv("DHS_D")\n'
        "d = {environ.get(n) for n in SECRETS}\n"
        'e = os.environ.setdefault(f"DHS_{OTHER}", "")\n'
        "f = os.environ.get(OTHER)\n"  # not ours: allowed
        "def g(env=os.environ):\n    return env\n"
        "def h(obj):\n    return os.environ.get(obj.name)\n"
    )
    found = [line.split(": ", 1)[1] for line in environment_reads(tmp_path)]
    assert found == [
        "reads DHS_C",
        "reads DHS_A",
        "reads DHS_D",
        "reads DHS_B",
        "reads DHS_…",
        "os.environ as a parameter's default",
        "reads an environment variable the scan cannot name",
    ]


def test_the_library_fallbacks_are_the_settings_defaults():
    """One default per setting: where the Spark library falls back on its own (beneath the
    operator's files, darkhaloscope/catalog/spark_conf.py), it is the setting's default."""
    from darkhaloscope.catalog import spark_conf
    from resources.settings import default

    assert default(spark_conf.MASTER_ENV) == spark_conf.DEFAULT_MASTER
    assert float(default(spark_conf.TIMEOUT_ENV)) == spark_conf.DEFAULT_TIMEOUT_S
    assert default(spark_conf.DRIVER_MEMORY_ENV) == spark_conf.DEFAULT_DRIVER_MEMORY
