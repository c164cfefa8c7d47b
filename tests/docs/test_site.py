"""The documentation site (mkdocs.yml): it builds with no warning, its links resolve, its navigation holds every
page, its API pages document every hook docs/api.md names, the env and API pages carry a search boost, and (slow) a
real headless Chromium renders the home page, an env page and the API page, finds ``TextEnv`` and each env's page
through the site's search, and shows the learning results at 1280 px without a sideways scroll of the page.

The site needs the docs packages (MkDocs, Material, mkdocstrings) and, for the browser test, Debian's
``chromium``; neither test skips without them: CI installs both.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from helpers import ROOT

DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built by ``mkdocs build --strict`` into a temporary folder (the build's output checked here)."""
    out = tmp_path_factory.mktemp("site") / "site"
    # Material's banner about MkDocs 2 is not a build warning; the code host's URL is a stand-in (the project names
    # no public repository yet: mkdocs.yml)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "AGENTRL_REPO_URL": "https://example.invalid/agentrl-gym"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    (out.parent / "build.log").write_text(log, encoding="utf-8")
    assert "No module named mkdocs" not in log, "the site needs the docs packages: pip install -e '.[dev]'"
    assert done.returncode == 0, log[-4000:]
    assert not re.search(r"^WARNING\b", log, re.M), log[-4000:]
    return out


# ---------------------------------------------------------------------------------------------- the build


def test_the_site_builds_with_no_warning_and_has_every_page(site):
    pages = sorted(p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md") if "_mkdocs" not in p.parts)
    missing = [str(p) for p in pages
               if not (site / (p.parent if p.name in ("index", "README") else p) / "index.html").is_file()]
    assert not missing, f"pages the build did not write: {missing}"
    assert (site / "search" / "search_index.json").is_file()


def test_the_site_is_at_most_10_mb_shows_the_figures_drawn_from_committed_data_and_holds_no_raw_data(site):
    """Issue 61: the built site at most 10 MB. The results' raw data stays in the repository (mkdocs.yml's
    exclude_docs) and only the figures a page shows are in the site, drawn from that data by the figures hook
    (docs/_mkdocs/figures.py; none is committed)."""
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    assert size <= 10_000_000, f"the built site is {size / 1e6:.1f} MB"
    assert not (site / "results" / "data").exists()
    learning = (site / "results" / "learning" / "index.html").read_text(encoding="utf-8")
    assert 'src="../tooluse/eval_eval_comparison.png"' in learning
    assert (site / "results" / "tooluse" / "eval_eval_comparison.png").read_bytes()[:4] == b"\x89PNG"
    assert (site / "results" / "speed_history.png").is_file()
    assert not (site / "results" / "tooluse" / "grpo_env.png").exists()  # linked from its run page only
    run_page = (site / "results" / "learning_tooluse" / "index.html").read_text(encoding="utf-8")
    assert "<code>grpo_env.png</code>" in run_page and "learning_page.py --figures" in run_page


def test_the_site_leaves_out_source_maps_and_search_languages_it_does_not_use(site):
    """Issue 61: lunr's language files (0.9 MB), never loaded for an English-only search (_mkdocs/site_size.py)."""
    assert json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))["config"]["lang"] == ["en"]
    assert not (site / "assets" / "javascripts" / "lunr").exists() and not list(site.rglob("*.map"))
    files = _hook("site_size").search_files  # Material's search worker's loader, mirrored
    assert files(["en"]) == set() and "wordcut.js" in files(["th"]) and "min/lunr.multi.min.js" in files(["en", "ja"])


class _Links(HTMLParser):
    """The ids of a page and the links (href, src) it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("href", "src") and value:
                self.links.append(value)


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _target(site: Path, page: Path, link: str) -> tuple[Path, str] | None:
    """The file a relative link of ``page`` points to, and its anchor; None for a link off the site."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("//", "mailto:", "javascript:")):
        return None
    path = unquote(parts.path)
    target = page if not path else (site / path.lstrip("/") if path.startswith("/") else page.parent / path)
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target.resolve(), unquote(parts.fragment)


def test_every_internal_link_of_the_built_site_resolves(site):
    """Every relative link of every page (the theme's, the navigation's, the API pages' and the pages' own)
    reaches a file of the site, and its #anchor an id of that page. No network: external links are not
    followed."""
    pages = sorted(site.rglob("*.html"))
    parsed = {p.resolve(): _parse(p) for p in pages}
    broken = []
    for page in pages:
        for link in parsed[page.resolve()].links:
            found = _target(site, page, link)
            if found is None:
                continue
            target, anchor = found
            if not target.is_relative_to(site.resolve()) or not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif anchor and target.suffix == ".html" and anchor not in parsed[target].ids:
                broken.append(f"{page.relative_to(site)}: {link} (no id {anchor!r} there)")
    assert not broken, f"{len(broken)} broken links, e.g.:\n" + "\n".join(broken[:20])


def test_a_broken_link_fails_the_build(tmp_path):
    """The link check is live: with this site's mkdocs.yml, a page linking to a missing page, a missing anchor
    or a missing file of the checkout fails ``mkdocs build --strict``, each with its own warning; the same
    pages without them build."""
    (tmp_path / "mkdocs.yml").write_text((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "typecheck").mkdir()
    shutil.copytree(DOCS / "_mkdocs", tmp_path / "docs" / "_mkdocs")
    (tmp_path / "code.py").write_text("", encoding="utf-8")
    page = tmp_path / "docs" / "index.md"

    def build(text: str) -> tuple[int, str]:
        page.write_text(f"# Home\n\n## A heading\n\n[code](../code.py) [here](#a-heading) {text}\n", encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                              cwd=tmp_path, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
                              text=True, timeout=600)
        return done.returncode, done.stdout + done.stderr

    code, log = build("")
    assert code == 0, log[-3000:]
    code, log = build("[a](no-such-page.md) [b](#no-such-heading) [c](../no_such_file.py)")
    assert code != 0, log[-3000:]
    warnings = re.findall(r"^WARNING .*$", log, re.M)
    for target in ("no-such-page.md", "no-such-heading", "../no_such_file.py"):
        assert any(target in w for w in warnings), (target, warnings)
    assert len(warnings) == 3, warnings


def _hook(name: str):
    """A module of docs/_mkdocs/ (the site's build hooks), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"mkdocs_{name}", DOCS / "_mkdocs" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_to_files_outside_docs_go_to_the_code_host(site):
    """Every link of a page to a file of the checkout outside docs/ (``../algos/rollout/collector.py``) is, on
    the built page, a link to that file on the code host (mkdocs.yml's repo_url, docs/_mkdocs/source_links.py),
    not its bare text; each page has an edit link; the header links to the repository without asking the host's
    API for stars (Material's ``data-md-component="source"``: the site loads nothing from outside)."""
    home = (site / "index.html").read_text(encoding="utf-8")
    header = re.search(r'<a href="([^"]+)" title="[^"]*" class="md-source"[^>]*>', home)
    assert header, "no repository link in the header: set repo_url in mkdocs.yml"
    assert "data-md-component" not in header.group(0), header.group(0)
    repo = header.group(1).rstrip("/")
    links = _hook("source_links")
    expected = 0
    for source in sorted(DOCS.rglob("*.md")):
        if "_mkdocs" in source.parts:
            continue
        rel = source.relative_to(DOCS)
        built = site / (rel.parent if rel.stem in ("index", "README") else rel.with_suffix("")) / "index.html"
        hrefs = set(_parse(built).links)
        assert f"{repo}/edit/main/docs/{rel.as_posix()}" in hrefs, rel
        prose = links.FENCE.sub("", source.read_text(encoding="utf-8"))
        for match in links.LINK.finditer(prose):
            path, _, anchor = match.group("target").partition("#")
            if re.match(r"^[a-z][a-z0-9+.-]*:", path, re.I) or path.startswith("/"):
                continue
            target = (source.parent / path).resolve()
            if target.is_relative_to(DOCS.resolve()) or not target.is_relative_to(ROOT.resolve()) or not path:
                continue
            assert target.exists(), f"{rel}: {path} (a missing file fails the build)"
            kind = "tree" if target.is_dir() else "blob"
            url = f"{repo}/{kind}/main/{target.relative_to(ROOT.resolve()).as_posix()}"
            url += f"#{anchor}" if anchor else ""
            assert url in hrefs, f"{rel}: {match.group(0)} is not a link to {url}"
            expected += 1
    assert expected >= 50, expected  # the pages link to code, tests and benchmarks throughout


def test_without_a_code_host_links_outside_docs_stay_text_and_pages_have_no_edit_button():
    """mkdocs.yml names no repository unless ``AGENTRL_REPO_URL`` is set (the project has no public one yet): then a
    link to ``../algos/...`` is its text (never a made-up URL) and ``edit_uri`` is dropped (it needs a host)."""
    import types

    links = _hook("source_links")
    config = types.SimpleNamespace(repo_url=None, edit_uri="edit/main/docs/", config_file_path=str(ROOT / "mkdocs.yml"))
    assert links.on_config(config).edit_uri is None
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="collector.md"))
    out = links.on_page_markdown("see [the collector](../algos/rollout/collector.py) and [x](quickstart.md)", page,
                                 config, None)
    assert out == "see the collector and [x](quickstart.md)", out


def _nav_links(site: Path) -> set[str]:
    """The pages the home page's navigation links to, as site paths (``envs/tool_use/``)."""
    html = (site / "index.html").read_text(encoding="utf-8")
    nav = html[html.index('class="md-nav md-nav--primary"'):html.index('md-sidebar--secondary')]
    return set(re.findall(r'href="([^"#]*)"', nav))


def test_the_navigation_holds_every_page(site):
    """Every page of docs/ is in the navigation (issue 61), the results' run pages too, grouped under Results; a
    page added to docs/ (an env's page in docs/envs/, a results page) is placed by docs/.nav.yml's globs without an
    edit there, and the build lists no page "not included in the nav"."""
    nav = {p.strip("./").rstrip("/") for p in _nav_links(site)}
    expected = {str(p.relative_to(DOCS).with_suffix("")) for p in DOCS.rglob("*.md") if "_mkdocs" not in p.parts}
    expected = {e.removesuffix("/index").removesuffix("index") for e in expected}
    assert {"envs/tool_use", "api/core", "results/learning_tooluse_chains", "results/transfer"} <= nav, sorted(nav)
    assert not expected - nav, f"pages missing from the navigation: {sorted(expected - nav)}"
    log = (site.parent / "build.log").read_text(encoding="utf-8")
    assert "not included in the \"nav\"" not in log, log[-3000:]
    html = re.sub(r"\s+", " ", (site / "index.html").read_text(encoding="utf-8"))
    nav_html = html[html.index('class="md-nav md-nav--primary"'):html.index("md-sidebar--secondary")]
    results = nav_html[nav_html.index('"md-ellipsis"> Results <'):nav_html.index('"md-ellipsis"> API reference <')]
    assert "learning_pythonmath_sft48/" in results and "coldstart_probe/" in results  # grouped under Results


def _front_matter(page: Path) -> dict:
    import yaml

    text = page.read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    return (yaml.safe_load(match.group(1)) or {}) if match else {}


BOOSTED = sorted([*(DOCS / "envs").glob("*.md"), DOCS / "api.md", *(DOCS / "api").glob("*.md")])


def test_env_and_api_pages_carry_a_search_boost(site):
    """Each env page (docs/envs/) and API page (docs/api.md, docs/api/) sets Material's ``search.boost`` in its front
    matter, above 1 and the env pages' at least the API pages', and the built search index holds it for the page
    (a search for "BFCL" ranks the env page first: the slow test below)."""
    index = {d["location"]: d.get("boost") for d in
             json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]}
    assert len(BOOSTED) >= 20
    for page in BOOSTED:
        boost = _front_matter(page).get("search", {}).get("boost")
        assert isinstance(boost, (int, float)) and boost > 1, f"{page.relative_to(ROOT)}: search.boost is {boost}"
        if page.parent.name == "envs":
            assert boost >= max(_front_matter(p)["search"]["boost"] for p in BOOSTED if "api" in p.parts[-2:]), page
        location = page.relative_to(DOCS).with_suffix("").as_posix() + "/"
        assert index.get(location.removesuffix("index/")) == boost, (location, index.get(location))


def test_the_api_pages_document_every_hook_docs_api_names(site):
    """Each row of docs/api.md's table links to an API page; every hook its last column names in backticks is
    a heading (an id) there."""
    rows = 0
    for row in (DOCS / "api.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        if len(cells) != 3 or "`agentrl." not in cells[1]:
            continue
        rows += 1
        [page] = re.findall(r"\]\((api/\w+)\.md\)", cells[1])
        ids = _parse(site / page / "index.html").ids
        modules = re.findall(r"`(agentrl\.[\w.]+)`", cells[1])
        assert all(m in ids for m in modules), (page, modules)
        hooks = re.findall(r"`(\w+)`", re.sub(r"\[[^\]]*\]\([^)]*\)", "", cells[2]))
        missing = [h for h in hooks if not any(i == h or i.endswith(f".{h}") for i in ids)]
        assert not missing, f"{page}: no heading for {missing}"
    assert rows >= 12


# ---------------------------------------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def served(site) -> Iterator[str]:
    """The built site served on 127.0.0.1 (a free port) for the test's duration."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class Chromium:
    """A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
    messages ended by a NUL byte on file descriptors 3 and 4; no websocket, no extra package)."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        binary = shutil.which("chromium")
        assert binary, "no chromium: apt-get install -y chromium (Debian's package)"
        commands, self._responses = os.pipe(), os.pipe()
        ours = (commands[1], self._responses[0])

        def child_fds() -> None:  # chromium reads commands on fd 3 and writes responses on fd 4
            read, write = os.dup(commands[0]), os.dup(self._responses[1])
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "--remote-debugging-pipe",
             "about:blank"],
            preexec_fn=child_fds, close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(commands[0])
        os.close(self._responses[1])
        self._out, self._in = os.fdopen(ours[0], "wb", buffering=0), os.fdopen(ours[1], "rb", buffering=0)
        self._buffer, self._id = b"", 0
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})[
            "sessionId"]
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, page=True)

    def call(self, method: str, params: dict | None = None, page: bool = False) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self.session
        self._out.write(json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = self._in.read(1 << 16)
                assert chunk, f"chromium closed the pipe during {method}"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, page=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0):
        """The value of ``expression`` once it is truthy (polled; the page's scripts and workers run meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"not true within {timeout} s: {expression}")

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, page=True)
        self.wait_for("document.readyState === 'complete' && location.href === " + json.dumps(url))

    def screenshot(self, path: Path) -> Path:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"}, page=True)["data"]))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.process.wait(timeout=20)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._out.close()
            self._in.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        chromium = Chromium(Path(profile))
        try:
            yield chromium
        finally:
            chromium.close()


def _not_blank(png: Path) -> tuple[int, float]:
    """(number of distinct colours, share of pixels that differ from the most common one) of a screenshot."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 24) or []
    background = max(count for count, _ in colours)
    return len(colours), 1 - background / (image.width * image.height)


SCREENS = {  # page -> its <h1>, a selector that only renders when the page's content is there
    "": ("agentrl-gym documentation", "table"),
    "envs/tool_use/": ("AgentRL/ToolUse-v0", "pre code"),
    "api/core/": ("Environments: TextEnv", "[id='agentrl.envs.core.TextEnv.sample_task']"),
}


@pytest.mark.slow
@pytest.mark.parametrize("page", list(SCREENS))
def test_chromium_renders_the_page_with_the_theme(served, browser, page, tmp_path):
    """The home page, ToolUse-v0's page and the API page in a real headless Chromium: the title, the content,
    the theme's stylesheet applied (a coloured header) and a screenshot that is not blank."""
    title, content = SCREENS[page]
    browser.open(served + page)
    assert browser.evaluate("document.querySelector('article h1').innerText").startswith(title)
    assert browser.evaluate(f"!!document.querySelector({json.dumps('article ' + content)})")
    header = browser.evaluate("getComputedStyle(document.querySelector('header.md-header')).backgroundColor")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent", "rgb(255, 255, 255)"), header
    shot = browser.screenshot(tmp_path / ((page.strip("/").replace("/", "_") or "home") + ".png"))
    colours, ink = _not_blank(shot)
    print(f"screenshot: {shot} ({colours} colours, {ink:.0%} not background)")
    assert colours > 50 and ink > 0.05, (shot, colours, ink)


@pytest.mark.slow
def test_the_sites_search_finds_textenv_in_chromium(served, browser):
    """Material's search reads ``?q=`` from the address: its web worker indexes the site, and the result list
    shows the API page of ``TextEnv`` among the first results."""
    browser.open(served + "?q=TextEnv")
    results = browser.wait_for(
        "[...document.querySelectorAll('.md-search-result__item a')].map(a => [a.href, a.innerText])")
    hrefs = [href for href, _ in results]
    assert any(urlsplit(h).path.rstrip("/").endswith("api/core") for h in hrefs[:5]), hrefs[:10]
    assert any("TextEnv" in text for _, text in results[:5]), results[:5]


ENV_NAMES = {re.search(r"^# AgentRL/(\w+)-v0$", p.read_text(encoding="utf-8"), re.M).group(1): p.stem
             for p in sorted((DOCS / "envs").glob("*.md"))}


@pytest.mark.slow
def test_a_search_for_an_envs_name_ranks_its_page_first(served, browser):
    """Issue 61: a search for "BFCL" ranked the learning results first and the env page 6th. With the env pages'
    search.boost and a separator that keeps "ToolUse" one word (mkdocs.yml), each env's name finds its page first."""
    assert len(ENV_NAMES) >= 7 and ENV_NAMES["BFCL"] == "bfcl", ENV_NAMES
    for name, stem in ENV_NAMES.items():
        browser.open(served + "?q=" + name)
        hrefs = browser.wait_for("[...document.querySelectorAll('.md-search-result__item > a')].map(a => a.href)")
        assert urlsplit(hrefs[0]).path.rstrip("/").endswith(f"envs/{stem}"), (name, hrefs[:5])


@pytest.mark.slow
@pytest.mark.parametrize("page", ["results/learning/", "quickstart/"])
def test_at_1280_px_the_page_never_scrolls_sideways_and_code_wraps(served, browser, page, tmp_path):
    """Issue 61 (docs/_mkdocs/overrides/assets/stylesheets/agentrl.css): at 1280 px the page is no wider than the
    window; every code block wraps its long lines (none scrolls sideways); on the learning page a figure of the
    wide verdict tables, "78.1 (3 seeds)", is on one line (it was broken over two), the table scrolling in its box,
    and no entry of its table of contents takes more than two lines (some took five)."""
    browser.open(served + page)
    assert browser.evaluate("window.innerWidth") == 1280
    assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
    wide = browser.evaluate("[...document.querySelectorAll('article pre > code')]"
                            ".filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.innerText.slice(0, 80))")
    if page == "quickstart/":
        assert browser.evaluate("document.querySelectorAll('article pre > code').length") >= 5
    assert not wide, f"code blocks that scroll sideways: {wide}"
    if page == "results/learning/":
        lines = browser.evaluate("""[...document.querySelectorAll('article table td')]
            .filter(td => / \\(\\d+ seeds\\)$/.test(td.innerText.trim()))
            .map(td => { const r = document.createRange(); r.selectNodeContents(td);
                         return new Set([...r.getClientRects()].map(x => Math.round(x.bottom))).size; })""")
        assert len(lines) >= 10 and max(lines) == 1, lines  # each such figure on one line
        toc = browser.evaluate("[...document.querySelectorAll('.md-sidebar--secondary .md-nav__link .md-ellipsis')]"
                               ".map(e => e.getBoundingClientRect().height"
                               " / parseFloat(getComputedStyle(e).lineHeight))")
        assert len(toc) >= 10 and max(toc) <= 2.05, toc  # a table of contents' entry takes at most two lines
    browser.screenshot(tmp_path / (page.strip("/").replace("/", "_") + ".png"))
