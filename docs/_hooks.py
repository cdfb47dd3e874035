"""mkdocs hooks: the ADRs become pages of the site under ``adr/``, so the docs' links to
``../adr/NNNN-title.md`` (which hold in the repository) hold in the built site too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ADR = Path(__file__).parent.parent / "adr"
OUT_OF_DOCS = re.compile(r"\]\(\.\./(adr|docs)/")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File, InclusionLevel

    rows = [f"- [{_title(path)}]({path.name})" for path in sorted(ADR.glob("*.md"))]
    index = "# Architecture decision records\n\n" + "\n".join(rows) + "\n"
    files.append(File.generated(config, "adr/index.md", content=index,
                                inclusion=InclusionLevel.NOT_IN_NAV))  # fmt: skip
    for path in sorted(ADR.glob("*.md")):
        files.append(
            File.generated(
                config, f"adr/{path.name}", abs_src_path=str(path),
                inclusion=InclusionLevel.NOT_IN_NAV,
            )
        )  # fmt: skip
    return files


def _title(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    return first.lstrip("# ").strip() or path.stem


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """A top-level page's ``../adr/X`` is the site's ``adr/X``; an ADR's ``../docs/X`` is
    ``../X``."""
    markdown = markdown.replace("](../adr/)", "](../adr/index.md)")
    if page.file.src_uri.startswith("adr/"):
        return OUT_OF_DOCS.sub(lambda m: "](../" if m[1] == "docs" else "](", markdown)
    return OUT_OF_DOCS.sub(lambda m: "](adr/" if m[1] == "adr" else "](", markdown)
