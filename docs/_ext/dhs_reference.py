"""The reference pages, generated from the code at build time so they cannot drift.

Directives (MyST: ```` ```{dhs-tables} ```` on a line of its own):

- ``dhs-assets``: every asset of ``definitions.defs`` by group: description, partitions, inputs,
  checks with their blocking flags, run config;
- ``dhs-asset-graph``: the stage-level flow and the assets in dependency order (``docs/asset_graph.py``);
- ``dhs-tables``: every table of ``table_registry.TABLES``: key, partitioning, audits, and
  each column's type, unit and description from its contract, with the contract's rules;
- ``dhs-settings``: every ``DHS_`` variable of ``resources.settings.SETTINGS`` with the commands
  that read it;
- ``dhs-commands``: every ``dhs`` command from ``dhs.main.build_parser``.

Each renders Markdown that MyST parses in place. A new table, asset, setting or command appears
without a documentation edit; ``tests/test_docs.py`` checks that each one does.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import pathlib
import re
import textwrap

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

DOCS = pathlib.Path(__file__).resolve().parents[1]


def label(kind: str, name: str) -> str:
    """The cross-reference label of an asset, a table, a setting or a command: ``{kind}-{name}``,
    lower case, ``-`` for ``_`` (``table-search-scores``, ``env-dhs-lake``, ``dhs-query``)."""
    return f"{kind}-{name}".lower().replace("_", "-")


def _cell(text) -> str:
    """Text safe inside a Markdown table cell (one line, pipes escaped)."""
    return " ".join(str(text).split()).replace("|", "\\|") if text not in (None, "") else ""


def _code(text) -> str:
    return f"`{text}`" if text not in (None, "") else ""


def _doc(text: str | None) -> str:
    """A docstring as Markdown paragraphs (indentation removed, line breaks of a paragraph kept)."""
    return inspect.cleandoc(text) if text else ""


# --- assets ------------------------------------------------------------------------------------------


def _config_fields(assets_def) -> list[tuple[str, str, str, str]]:
    """(name, type, default, description) of an asset's run config, from its Dagster config
    schema; descriptions from the pydantic Config class where it has them."""
    schema = assets_def.op.config_schema
    config_type = getattr(schema, "config_type", None)
    fields = getattr(config_type, "fields", None) or {}
    described: dict[str, str] = {}
    fn = getattr(assets_def.op.compute_fn, "decorated_fn", None)
    fn = inspect.unwrap(fn) if fn is not None else None
    if fn is not None:
        for p in inspect.signature(fn).parameters.values():
            model_fields = getattr(p.annotation, "model_fields", None)
            if model_fields:
                described = {k: v.description or "" for k, v in model_fields.items()}
    rows = []
    for name, field in fields.items():
        typ = getattr(field.config_type, "given_name", None) or field.config_type.key
        typ = typ.replace("Noneable.", "").replace("SourceType", "").replace("StringSource", "String")
        default = repr(field.default_value) if field.default_provided else "required"
        rows.append((name, typ, default, described.get(name) or field.description or ""))
    return rows


def assets_markdown(defs) -> str:
    """Every asset of ``defs`` by group (in pipeline order), as Markdown."""
    from table_registry import TABLES

    graph = defs.resolve_asset_graph()
    tables = {t.path: t for t in TABLES}
    groups: dict[str, list] = {}
    for key in graph.get_all_asset_keys():
        groups.setdefault(graph.get(key).group_name, []).append(key)
    order = [t.group for t in TABLES]
    out = []
    for group in sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g)):
        out.append(f"## Group `{group}`\n")
        for key in sorted(groups[group], key=lambda k: k.path[-1]):
            node = graph.get(key)
            name, path = key.path[-1], key.to_user_string()
            out.append(f"({label('asset', name)})=\n### `{name}`\n")
            facts = [f"key `{path}`"]
            part = node.partitions_def
            if part is not None:
                facts.append(f"partitioned per `{getattr(part, 'name', None) or type(part).__name__}`")
            if not node.is_materializable:
                facts.append("external: reported by the alert sensor, not materialized")
            if node.code_version:
                facts.append(f"code version `{node.code_version}`")
            if path in tables:
                facts.append(f"table [`{name}`](#{label('table', name)})")
            out.append("; ".join(facts) + ".\n")
            out.append(_doc(node.description) + "\n")
            parents = sorted(p.path[-1] for p in node.parent_keys)
            reads = ", ".join(f"[`{p}`](#{label('asset', p)})" for p in parents)
            out.append(f"Reads: {reads or 'nothing (a source)'}.\n")
            checks = sorted(node.check_keys, key=lambda c: c.name)
            if checks:
                out.append("| check | blocking | what it checks |\n|---|---|---|")
                for ck in checks:
                    spec = graph.get(ck)
                    out.append(
                        f"| `{ck.name}` | {'yes' if spec.blocking else 'no (warns)'} | {_cell(spec.description)} |"
                    )
                out.append("")
            if node.is_materializable:
                fields = _config_fields(node.assets_def)
                if fields:
                    out.append("Run config (`dhs materialize --config` or the launchpad):\n")
                    out.append("| field | type | default | meaning |\n|---|---|---|---|")
                    out += [f"| `{n}` | {_cell(t)} | {_code(d)} | {_cell(m)} |" for n, t, d, m in fields]
                    out.append("")
    return "\n".join(out)


def _asset_graph_module():
    spec = importlib.util.spec_from_file_location("asset_graph", DOCS / "asset_graph.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def asset_graph_markdown(defs) -> str:
    return "```text\n" + _asset_graph_module().asset_graph_text(defs) + "```\n"


# --- tables ------------------------------------------------------------------------------------------


def _range_text(r) -> str:
    lo = "−∞" if r.lo is None else f"{r.lo:g}"
    hi = "∞" if r.hi is None else f"{r.hi:g}"
    left = "[" if r.lo_inclusive and r.lo is not None else "("
    right = "]" if r.hi_inclusive and r.hi is not None else ")"
    return f"`{r.column}` in {left}{lo}, {hi}{right}" + (" or null" if r.nullable else "")


def tables_markdown() -> str:
    """Every registry table by group, with its columns from the contract, as Markdown."""
    from table_registry import TABLES

    out = []
    group = None
    for t in TABLES:
        if t.group != group:
            group = t.group
            out.append(f"## Group `{group}`\n")
        out.append(f"({label('table', t.name)})=\n### `{t.name}`\n")
        facts = [f"`<lake>/{t.path}/` in the lake", f"asset [`{t.name}`](#{label('asset', t.name)})"]
        facts.append(f"one partition per `{t.partitioned_by}`" if t.partitioned_by else "not partitioned")
        out.append(f"{t.description[0].upper()}{t.description[1:]}. " + "; ".join(facts) + ".\n")
        if t.audits:
            out.append(
                "Audits before publication: "
                + ", ".join(f"`{a.name}` ({'blocking' if a.blocking else 'warns'})" for a in t.audits)
                + ".\n"
            )
        c = t.contract
        if c is None:
            continue
        rules = []
        if c.key:
            rules.append("unique key (" + ", ".join(f"`{k}`" for k in c.key) + ")")
        rules += [_range_text(r) for r in c.ranges]
        rules += [f"`{col}` one of " + ", ".join(f"`{v}`" for v in vals) for col, vals in c.allowed_values.items()]
        if rules:
            out.append("Contract: " + "; ".join(rules) + ".\n")
        out.append("| column | type | unit | description |\n|---|---|---|---|")
        for col in c.columns:
            optional = "" if col.required else " *(optional)*"
            out.append(f"| `{col.name}`{optional} | {_code(col.type)} | {_cell(col.unit)} | {_cell(col.description)} |")
        out.append("")
    return "\n".join(out)


# --- settings and commands ---------------------------------------------------------------------------


def settings_markdown() -> str:
    """Every DHS_ variable by group, with its default, meaning and the commands that read it."""
    from dhs.main import READS, settings_read_by
    from resources.settings import SETTINGS

    out = []
    group = None
    for s in SETTINGS:
        if s.group != group:
            group = s.group
            out.append(f"## {group[0].upper()}{group[1:]}\n")
        default = f"default `{s.default}`" if s.default is not None else "unset by default"
        readers = [c for c in READS if s in settings_read_by(c)]
        read_by = ", ".join(f"[`dhs {c}`](#{label('dhs', c)})" for c in readers) or "the tests only"
        out.append(f"({label('env', s.name)})=\n`{s.name}`\n: {s.meaning} ({default}; read by {read_by}).\n")
    return "\n".join(out)


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split()).removeprefix("usage: ")


def commands_markdown() -> str:
    """Every ``dhs`` command from its parser: usage, what it does, arguments, what it reads."""
    from dhs.main import _DAGSTER_HOME, _USES_INSTANCE, READS, build_parser, settings_read_by

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [f"```text\n{_usage(parser)}\n```\n", parser.epilog + "\n"]
    for name, p in sub.choices.items():
        out.append(f"({label('dhs', name)})=\n## `dhs {name}`\n")
        out.append(f"```text\n{_usage(p)}\n```\n")
        out.append(textwrap.dedent(p.description or "") + "\n")
        args = [a for a in p._actions if not isinstance(a, argparse._HelpAction)]
        if args:
            out.append("| argument | default | meaning |\n|---|---|---|")
            for a in args:
                arg = ", ".join(a.option_strings) or a.dest
                if a.choices:
                    arg += " {" + ",".join(map(str, a.choices)) + "}"
                default = "" if a.default in (None, [], argparse.SUPPRESS) or a.required else _code(a.default)
                required = " (required)" if a.required and a.option_strings else ""
                out.append(f"| `{arg}` | {default} | {_cell(a.help)}{required} |")
            out.append("")
        reads = settings_read_by(name)
        if reads:
            names = ", ".join(f"[`{s.name}`](#{label('env', s.name)})" for s in reads)
            home = f" and `{_DAGSTER_HOME[0]}` ({_DAGSTER_HOME[1]})" if name in _USES_INSTANCE else ""
            out.append(f"Reads {names}{home}.\n")
        assert name in READS
    return "\n".join(out)


# --- the directives ----------------------------------------------------------------------------------


class _Generated(SphinxDirective):
    """Renders the Markdown of ``self.markdown()`` in place (headings allowed)."""

    has_content = False

    def markdown(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        text = self.markdown()
        self.state.nested_parse(StringList(text.splitlines()), 0, container, match_titles=True)
        return container.children


def _defs():
    from definitions import defs

    return defs


class AssetsDirective(_Generated):
    def markdown(self) -> str:
        return assets_markdown(_defs())


class AssetGraphDirective(_Generated):
    def markdown(self) -> str:
        return asset_graph_markdown(_defs())


class TablesDirective(_Generated):
    def markdown(self) -> str:
        return tables_markdown()


class SettingsDirective(_Generated):
    def markdown(self) -> str:
        return settings_markdown()


class CommandsDirective(_Generated):
    def markdown(self) -> str:
        return commands_markdown()


_LIST_ITEM = re.compile(r"^\s*(?:[-*] |\d+\. )")
#: ``name : text`` (a numpy-style parameter line) or ``name: text`` at the margin
_PARAM = re.compile(r"^[A-Za-z_][\w ,|*]*? ?: \S")
_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def plain_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    """The library's docstrings are plain text read as reStructuredText; the habits of plain text
    that mean something else there are made explicit (nothing is reworded):

    - ``|x|`` (an absolute value, a norm) is a substitution: bars outside inline literals are escaped;
    - a list right under its introducing line ("Kinds:") gets a blank line before it, and the
      text after the list one after it;
    - a line back at the margin after indented continuation lines, or after a field list, starts
      a new paragraph;
    - ``name: text`` followed by indented continuation lines becomes a definition list item, and
      each ``name : text`` line of a numpy-style parameter list its own paragraph;
    - a section heading underlined with dashes ("Parameters") becomes a rubric."""

    def escaped(line: str) -> str:
        parts = re.split(r"(``.+?``)", line)
        return "".join(p if i % 2 else re.sub(r"(?<!\\)\|", r"\\|", p) for i, p in enumerate(parts))

    source: list[str] = []
    for line in lines:
        if _UNDERLINE.match(line) and source and source[-1].strip():
            source[-1] = f".. rubric:: {source[-1].strip()}"
            source.append("")
        else:
            source.append(line)
    out: list[str] = []
    list_indent: int | None = None
    field = False
    for line in source:
        text = line.strip()
        if not text:
            list_indent, field = None, False
            out.append(line)
            continue
        prev = out[-1] if out else ""
        item = bool(_LIST_ITEM.match(line))
        if prev.strip():
            if item and list_indent is None:
                out.append("")
            elif not item and list_indent is not None and _indent(line) <= list_indent:
                out.append("")
                list_indent = None
            elif field and not text.startswith(":") and _indent(line) == 0:
                out.append("")
                field = False
            elif _indent(line) < _indent(prev) and not item:
                out.append("")
            elif _indent(line) == 0 and _PARAM.match(line) and list_indent is None:
                out.append("")
            elif _indent(line) > _indent(prev) and list_indent is None and not field and len(out) > 1:
                if out[-2].strip():
                    out.insert(len(out) - 1, "")
        if item:
            list_indent = _indent(line)
        if text.startswith(":"):
            field = True
        out.append(escaped(line))
    lines[:] = out


def setup(app):
    app.connect("autodoc-process-docstring", plain_docstring)
    app.add_directive("dhs-assets", AssetsDirective)
    app.add_directive("dhs-asset-graph", AssetGraphDirective)
    app.add_directive("dhs-tables", TablesDirective)
    app.add_directive("dhs-settings", SettingsDirective)
    app.add_directive("dhs-commands", CommandsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
