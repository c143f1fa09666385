"""The documentation site builds with warnings as errors (as ``make docs`` does), its reference
names every asset, table, column, ``DHS_`` variable and ``dhs`` command of the code, and every
internal link of the built pages resolves, anchor included."""

import html.parser
import pathlib
import subprocess
import sys
import urllib.parse

import pytest

from docs._ext.dhs_reference import label

REPO = pathlib.Path(__file__).resolve().parents[1]


class _Page(html.parser.HTMLParser):
    """The ids and the link targets of one HTML page."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.loads: list[str] = []  # what the browser fetches to show the page

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for attr in ("href", "src"):
            if tag in ("a", "img", "link", "script") and attrs.get(attr):
                self.links.append(attrs[attr])
        if tag in ("img", "script") and attrs.get("src"):
            self.loads.append(attrs["src"])
        if tag == "link" and attrs.get("href") and attrs.get("rel") in ("stylesheet", "preload", "icon"):
            self.loads.append(attrs["href"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site: {path relative to the output folder: parsed page}."""
    out = tmp_path_factory.mktemp("docs")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(out / ".doctrees")]
    proc = subprocess.run(
        [*cmd, str(REPO / "docs"), str(out / "html")], capture_output=True, text=True, timeout=1200, cwd=REPO
    )
    assert proc.returncode == 0, f"sphinx-build failed (warnings are errors):\n{proc.stderr[-6000:]}"
    pages = {}
    for path in (out / "html").rglob("*.html"):
        if path.relative_to(out / "html").parts[0] == "_static":
            continue  # the theme's template macros, copied as they are, not pages
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        pages[path.relative_to(out / "html").as_posix()] = page
    return out / "html", pages


@pytest.mark.slow
def test_every_asset_is_in_the_reference(site):
    from definitions import defs

    _, pages = site
    ids = pages["reference/assets.html"].ids
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    assert len(keys) > 20
    missing = sorted(k.path[-1] for k in keys if label("asset", k.path[-1]) not in ids)
    assert missing == [], f"assets missing from reference/assets: {missing}"


@pytest.mark.slow
def test_every_table_and_column_is_in_the_reference(site):
    from table_registry import TABLES

    root, pages = site
    ids = pages["reference/tables.html"].ids
    assert len(TABLES) > 20
    assert sorted(t.name for t in TABLES if label("table", t.name) not in ids) == []
    text = (root / "reference" / "tables.html").read_text(encoding="utf-8")
    for t in TABLES:
        if t.contract is None:
            continue
        section = text.split(f'id="{label("table", t.name)}"', 1)[1].split('id="table-', 1)[0]
        missing = [c.name for c in t.contract.columns if f'<span class="pre">{c.name}</span>' not in section]
        assert missing == [], f"table {t.name}: columns missing from the reference: {missing}"


@pytest.mark.slow
def test_every_setting_and_command_is_in_the_reference(site):
    from dhs.main import READS
    from resources.settings import SETTINGS

    _, pages = site
    assert len(SETTINGS) > 20
    settings = pages["reference/settings.html"].ids
    assert sorted(s.name for s in SETTINGS if label("env", s.name) not in settings) == []
    commands = pages["reference/commands.html"].ids
    assert sorted(c for c in READS if label("dhs", c) not in commands) == []


@pytest.mark.slow
def test_every_internal_link_resolves(site):
    root, pages = site
    broken = []
    for name, page in pages.items():
        for link in page.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith("mailto:"):
                continue
            target = (root / name).parent / urllib.parse.unquote(url.path) if url.path else root / name
            target = target.resolve()
            if not target.exists():
                broken.append(f"{name}: {link} (no file)")
            elif url.fragment and target.suffix == ".html":
                ids = pages[target.relative_to(root.resolve()).as_posix()].ids
                if url.fragment not in ids:
                    broken.append(f"{name}: {link} (no anchor)")
    assert len(pages) > 50
    assert broken == []


@pytest.mark.slow
def test_the_site_reads_offline(site):
    """No page loads a script, style sheet, font or image from the network (MathJax, web fonts)."""
    _, pages = site
    remote = sorted({f"{name}: {src}" for name, page in pages.items() for src in page.loads if "//" in src})
    assert remote == []


@pytest.mark.parametrize("command", ["materialize", "demo", "query", "tables", "cutout", "grade"])
def test_each_commands_help_names_its_variables_and_its_page(command, capsys):
    from dhs.main import COMMANDS_PAGE, READS, build_parser, settings_read_by

    assert command in READS
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = capsys.readouterr().out
    reads = settings_read_by(command)
    assert reads and all(s.name in text for s in reads), text
    assert f"docs: {COMMANDS_PAGE}#{label('dhs', command)}" in text
    assert (REPO / COMMANDS_PAGE).exists()


def test_the_top_level_help_points_to_the_docs(capsys):
    from dhs.main import DOCS_INDEX, SETTINGS_PAGE, build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert DOCS_INDEX in text and SETTINGS_PAGE in text
    assert (REPO / DOCS_INDEX).exists() and (REPO / SETTINGS_PAGE).exists()
