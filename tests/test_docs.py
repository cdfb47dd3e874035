"""The docs hold (issue 20): the API reference builds from the docstrings without a warning,
every relative link of the docs, the ADRs and the README leads somewhere, and the guide's
harness type-checks under ``mypy --strict``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_api_reference_builds_without_a_warning(tmp_path: Path) -> None:
    pytest.importorskip("mkdocstrings", reason="mkdocs and mkdocstrings come with the docs extra")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr
    page = (tmp_path / "reference" / "process" / "index.html").read_text()
    assert "ChildGroup" in page
    assert "Run a tool to its end" in page
    # Issue 30: attributes are listed, with their type and a sentence.
    assert "RunResult.stdout" in page
    assert "What it wrote to stdout" in page
    harness = (tmp_path / "reference" / "harness" / "index.html").read_text()
    assert "HarnessContext.transcript" in harness
    assert "Example::" not in page
    assert '<code class="language-python">async with tether.ChildGroup(' in page
    assert _broken_links(tmp_path) == []


HREF = re.compile(r'(?:href|src)="([^"]+)"')


def _broken_links(site: Path) -> list[str]:
    """Every relative link of every built page that leads nowhere in the site."""
    broken = []
    for page in site.rglob("*.html"):
        for target in HREF.findall(page.read_text()):
            if "://" in target or target.startswith(("#", "mailto:", "data:")):
                continue
            file = target.split("#", 1)[0].split("?", 1)[0]
            base = site if file.startswith("/") else page.parent
            path = (base / file.lstrip("/")).resolve()
            if not (path.is_file() or (path / "index.html").is_file()):
                broken.append(f"{page.relative_to(site)} -> {target}")
    return broken


def test_every_public_attribute_has_a_sentence() -> None:
    """Issue 30: each attribute, constant and property the reference shows has a docstring,
    so the page says what it is, not only its type."""
    griffe = pytest.importorskip("griffe", reason="griffe comes with the docs extra")
    package = griffe.load("tether", search_paths=[str(ROOT / "src")])
    pages = [m for p in (ROOT / "docs" / "reference").glob("*.md")
             for m in re.findall(r"^::: tether\.(\S+)", p.read_text(), re.MULTILINE)]  # fmt: skip
    missing: list[str] = []

    def walk(obj: Any, path: str, depth: int) -> None:
        for name, member in obj.members.items():
            if name.startswith("_") or name == "TYPE_CHECKING":
                continue
            try:
                target = member.final_target if member.is_alias else member
            except Exception:  # an alias to something outside tether  # noqa: BLE001
                continue
            if target.kind.value == "attribute" and not target.docstring:
                missing.append(f"{path}.{name}")
            elif target.kind.value == "class" and depth < 2:
                walk(target, f"{path}.{name}", depth + 1)

    for page in pages:
        walk(package[page], f"tether.{page}", 0)
    assert missing == []


@pytest.mark.parametrize(
    "document",
    sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("docs/*.md"), *ROOT.glob("adr/*.md"),
                                              ROOT / "README.md", ROOT / "CHANGELOG.md"]),
)  # fmt: skip
def test_every_relative_link_leads_somewhere(document: str) -> None:
    path = ROOT / document
    for target in LINK.findall(path.read_text()):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        file = target.split("#", 1)[0]
        assert (path.parent / file).exists(), f"{document} links to {target}, which is not there"


def test_the_guide_s_harness_passes_mypy_strict(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy comes with the dev extra")
    code = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "guide.md").read_text(), re.DOTALL)
    engine = tmp_path / "engine.py"
    engine.write_text(code[0])
    stdout, stderr, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(engine)]
    )
    assert status == 0, stdout + stderr
