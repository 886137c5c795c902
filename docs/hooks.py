"""MkDocs hooks of the documentation site (`hooks:` in mkdocs.yml).

- The home page is README.md itself, its links into `docs/` made relative to the site, so the two
  never drift apart.
- The configuration and command-line references are generated from the code while the site is
  built (`orchestrator.cli.reference`): each of those pages holds a marker the table replaces.
- A `|` in code inside a table is written `\\|`, as GitHub needs it; the site's Markdown reads a code
  span's `|` as text already, and would show the backslash.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from orchestrator.cli.reference import cli_reference, configuration_reference

ROOT = Path(__file__).resolve().parents[1]
HOME = "index.md"

# Each generated page: the marker its file holds, and what replaces it.
GENERATED: dict[str, tuple[str, Callable[[], str]]] = {
    "cli.md": ("<!-- toolfleet:cli-reference -->", cli_reference),
    "configuration.md": ("<!-- toolfleet:configuration-reference -->", configuration_reference),
}

# The sections the settings' descriptions send the reader to ("see Brokers"), and where they are.
SEE_ALSO = {
    "Artifacts": "artifacts.md",
    "Brokers": "deployment.md#brokers-rabbitmq-and-redis-sentinel",
    "Compensation": "sagas.md",
    "Monitoring with Flower": "observability.md#monitoring-with-flower",
    "Tracing and metrics": "observability.md#tracing-and-metrics",
    "Rolling deploys: tool versions": "pools.md#rolling-deploys-tool-versions",
}


def home_page(readme: str) -> str:
    """README.md as the site's home page: `docs/page.md` and `docs/picture.png` links point into the site."""
    return re.sub(r"\]\(docs/", "](", readme)


def expand(src_uri: str, markdown: str) -> str:
    """The page's Markdown with its generated reference in place of its marker; a generated page
    whose marker is missing, or there twice, is refused."""
    if src_uri not in GENERATED:
        return markdown
    marker, generate = GENERATED[src_uri]
    if markdown.count(marker) != 1:
        raise PluginError(f"docs/{src_uri} must hold the marker {marker} once, where its reference goes")
    text = generate()
    if src_uri == "configuration.md":
        for section, target in SEE_ALSO.items():
            text = text.replace(f"see {section})", f"see [{section}]({target}))")
    return markdown.replace(marker, text)


def table_code_pipes(markdown: str) -> str:
    """`markdown` with the `\\|` inside the code spans of its table rows written `|`."""
    return "\n".join(
        re.sub(r"`[^`]*`", lambda code: code.group(0).replace("\\|", "|"), line)
        if line.startswith("|")
        else line
        for line in markdown.split("\n")
    )


def on_files(files: Files, config: Any) -> Files:
    if files.get_file_from_path(HOME) is not None:
        raise PluginError(f"docs/{HOME} would hide the home page, which is README.md: remove it")
    files.append(File.generated(config, HOME, content=home_page((ROOT / "README.md").read_text())))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return table_code_pipes(expand(page.file.src_uri, markdown))
