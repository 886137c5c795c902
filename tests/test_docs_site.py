"""The documentation site builds strictly (`make docs`): every link and anchor resolves, every page is
in the navigation, its home page is the README and its references are generated from the code."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from mkdocs.exceptions import PluginError

from orchestrator.cli.main import COMMANDS
from orchestrator.cli.reference import settings

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 50


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("toolfleet_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the project at `project` into `site`."""
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )


def copy_of_the_site(tmp_path: Path) -> Path:
    """The site's sources (mkdocs.yml, README.md, docs/) copied under `tmp_path`, to break one."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project)
    shutil.copy(ROOT / "README.md", project)
    shutil.copytree(ROOT / "docs", project / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    return project


def test_the_site_builds_strictly_with_its_generated_pages(tmp_path: Path) -> None:
    # when
    built = build(ROOT, tmp_path / "site")

    # then: no warning (strict), and the pages are there
    assert built.returncode == 0, built.stdout + built.stderr
    site = tmp_path / "site"
    home = (site / "index.html").read_text()
    assert "toolfleet is a distributed executor for LLM tool calls" in home  # the README
    assert 'src="ui-invocations.png"' in home  # its pictures, found in the site
    configuration = (site / "configuration.html").read_text()
    assert all(f"<code>{setting.variable}</code>" in configuration for setting in settings())
    cli = (site / "cli.html").read_text()
    assert all(f'id="toolfleet-{command}"' in cli for command in COMMANDS)
    # nothing on any page is fetched from another host: no web fonts, scripts or styles
    for page in site.rglob("*.html"):
        fetched = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', page.read_text())
        assert fetched == [], (page, fetched)
    # the hook module is the build's, not a page of the site
    assert not (site / "hooks.py").exists()


def test_a_broken_link_or_a_page_left_out_of_the_navigation_fails_the_build(tmp_path: Path) -> None:
    # given: a page with links to what the site does not have, and a page the navigation leaves out
    project = copy_of_the_site(tmp_path)
    with (project / "docs" / "concepts.md").open("a") as page:
        page.write("\nSee [a page](nowhere.md), [a section](pools.md#nowhere) and [a file](../Makefile).\n")
    (project / "docs" / "forgotten.md").write_text("# Forgotten\n")

    # when
    built = build(project, tmp_path / "site")

    # then: each is a warning, and a warning fails the build
    output = built.stdout + built.stderr
    assert built.returncode == 1
    for warning in (
        "'nowhere.md', but the target is not found",
        "does not contain an anchor '#nowhere'",
        "unrecognized relative link '../Makefile'",
        'not included in the "nav" configuration:\n  - forgotten.md',
    ):
        assert warning in output, output
    assert "Aborted with 4 warnings in strict mode" in output


def test_a_page_of_its_own_cannot_hide_the_readme_as_the_home_page(tmp_path: Path) -> None:
    project = copy_of_the_site(tmp_path)
    (project / "docs" / "index.md").write_text("# Another home\n")

    built = build(project, tmp_path / "site")

    assert built.returncode == 1
    assert "would hide the home page, which is README.md" in built.stdout + built.stderr


def test_the_readme_links_into_the_site_where_github_finds_them_too() -> None:
    # given: the README's links into docs/, as GitHub resolves them (from the repository's root)
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert len(targets) > 15, targets
    assert [t for t in targets if not (ROOT / t).is_file()] == []
    # then: the home page points at the same files from inside the site
    home = _hooks().home_page(readme)
    assert "](docs/" not in home
    assert "](configuration.md)" in home and "](ui-fleet.png)" in home


def test_each_generated_page_holds_its_marker_once_and_gets_its_reference() -> None:
    hooks = _hooks()
    for page, (marker, _) in hooks.GENERATED.items():
        text = (ROOT / "docs" / page).read_text()
        assert text.count(marker) == 1, page
        expanded = hooks.expand(page, text)
        assert marker not in expanded
        assert "| default |" in expanded, page


def test_a_generated_page_without_its_marker_is_refused() -> None:
    hooks = _hooks()
    with pytest.raises(PluginError, match="must hold the marker"):
        hooks.expand("configuration.md", "# Configuration\n\nThe table went missing.\n")


def test_the_configuration_reference_links_the_sections_it_names() -> None:
    hooks = _hooks()
    text = hooks.expand("configuration.md", (ROOT / "docs" / "configuration.md").read_text())
    assert re.findall(r"see (?!\[)[A-Z][^)]*\)", text) == []
    assert "see [Brokers](deployment.md#brokers-rabbitmq-and-redis-sentinel))" in text


def test_a_pipe_in_code_inside_a_table_is_shown_without_the_backslash_github_needs() -> None:
    hooks = _hooks()
    page = "| `--kind threads\\|prefork` | a \\| b |\n`x\\|y` outside a table\n"
    assert hooks.table_code_pipes(page) == "| `--kind threads|prefork` | a \\| b |\n`x\\|y` outside a table\n"
