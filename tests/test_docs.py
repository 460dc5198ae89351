"""The repository documents itself: nothing points to files a clone or an installed package lacks."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["README.md", "pyproject.toml", "docs", "mcsa_bench", "conf", "plugins", "benchmarks", ".ci"]
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".txt", ".cfg", ""}
#: inputs the project was built from, which do not exist beside a clone or an installation
OUTSIDE = re.compile(r"\.\./shared|reference\.md|mcsa-unifying-framework|mcmc-score-estimators-"
                     r"|inclusive-vi-parallel-imh|mcsa-section-draft")


def shipped_text_files():
    for entry in SHIPPED:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for candidate in candidates:
            if (candidate.is_file() and candidate.suffix in TEXT_SUFFIXES
                    and not {".venv", "__pycache__", "build"} & set(candidate.parts)
                    and not candidate.name.endswith(".egg-info")):
                yield candidate


def test_no_file_points_outside_the_repository():
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in shipped_text_files()
                 for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                 if OUTSIDE.search(line)]
    assert not offenders, "\n".join(offenders)


def test_the_check_would_catch_a_reference_outside():
    assert OUTSIDE.search("see ../shared/docs/reference.md §3")
    assert OUTSIDE.search("(mcmc-score-estimators-parallel-state.md App. C)")


@pytest.mark.parametrize("section", range(1, 9))
def test_methods_page_has_every_section_the_code_cites(section):
    assert f"## §{section} " in (ROOT / "docs" / "methods.md").read_text()


def test_every_cited_methods_section_exists():
    methods = (ROOT / "docs" / "methods.md").read_text()
    cited = {int(number) for path in shipped_text_files()
             for number in re.findall(r"methods\.md §(\d+)", path.read_text(errors="replace"))}
    assert cited and all(f"## §{number} " in methods for number in cited), cited


#: a Markdown link or image to a path in the repository (not a web address, not an anchor)
LOCAL_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)")


def test_every_local_link_and_figure_of_the_markdown_exists():
    """docs/results.md's figures, README's pages, ...: a link in a .md file resolves to a file of the repository."""
    links = [(path, target) for path in shipped_text_files() if path.suffix == ".md"
             for target in LOCAL_LINK.findall(path.read_text(errors="replace"))]
    assert any(target.startswith("figures/results/") for _, target in links)
    broken = [f"{path.relative_to(ROOT)}: {target}" for path, target in links if not (path.parent / target).exists()]
    assert not broken, "\n".join(broken)
    assert LOCAL_LINK.findall("![x](figures/none.png) [y](https://example.org) [z](#anchor)") == ["figures/none.png"]
