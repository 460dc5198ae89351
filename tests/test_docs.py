"""The repository documents itself: nothing points to files a clone or an installed package lacks."""

import json
import os
import re
from pathlib import Path

import pytest

from mcsa_bench.jobs.health import KHAT_DRAWS, KHAT_FIRST_DRAWS

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


#: a citation of a page of docs/ in code, configs or docs, with the section it names if any: a number
#: (``docs/methods.md §3``, ``docs/scaling.md §7-8``) or a heading's words (``docs/report.md, "The experiment
#: grids"``); ``../shared/docs/...`` is an input outside the repository (OUTSIDE above), not a citation
DOC_CITATION = re.compile(r'(?<![\w./])docs/([\w/-]+\.md)(?:,?\s+(?:§(\d+)(?:[-–](\d+))?|"([^"]+)"))?')


def cited_docs(text: str) -> list[tuple[str, str | None]]:
    """(page, section or None) for every citation of a docs/ page; a comment or docstring that breaks a
    citation across lines is read as one line."""
    flat = re.sub(r"\n\s*(?:#\s*)?", " ", text)
    return [(page, ("§" + first + (f"-{last}" if last else "")) if first else title or None)
            for page, first, last, title in DOC_CITATION.findall(flat)]


def section_problem(page: str, section: str | None) -> str | None:
    """Why a citation does not resolve: the page is missing, or none of its headings is the section
    (``§N``: a heading numbered ``§N`` or ``N.``; words: a heading that starts with them)."""
    path = ROOT / "docs" / page
    if not path.is_file():
        return f"docs/{page} does not exist"
    if section is None:
        return None
    headings = [re.sub(r"^#+\s+", "", line) for line in path.read_text().splitlines() if re.match(r"#+\s", line)]
    if section.startswith("§"):
        numbers = [int(n) for n in section[1:].split("-")]
        missing = [n for n in range(numbers[0], numbers[-1] + 1)
                   if not any(re.match(rf"(§{n}|{n}\.)\s", heading) for heading in headings)]
        return f"docs/{page} has no section {', '.join(map(str, missing))}" if missing else None
    titles = [re.sub(r"^(§\d+|\d+\.)\s+", "", heading).replace("`", "") for heading in headings]
    return None if any(t.startswith(section.replace("`", "")) for t in titles) else \
        f'docs/{page} has no heading "{section}"'


def test_every_cited_doc_page_and_section_exists():
    """A page of docs/ cited in the code, configs, tests or docs exists, and so does the section it names."""
    sources = [*shipped_text_files(), *(p for p in sorted((ROOT / "tests").rglob("*.py")) if p != Path(__file__))]
    citations = {(path.relative_to(ROOT), page, section) for path in sources
                 for page, section in cited_docs(path.read_text(errors="replace"))}
    assert len(citations) > 100 and any(section for _, _, section in citations)
    broken = sorted(f"{path}: {problem}" for path, page, section in citations
                    if (problem := section_problem(page, section)))
    assert not broken, "\n".join(broken)


def test_the_citation_check_catches_a_missing_page_and_section():
    assert cited_docs(
        'see docs/scaling.md §7-8 and (docs/report.md, "The experiment\n    # grids"), ../shared/docs/reference.md §3'
    ) == [("scaling.md", "§7-8"), ("report.md", "The experiment grids")]
    assert section_problem("scaling.md", "§7-8") is None and section_problem("methods.md", "§3") is None
    assert section_problem("report.md", "The experiment grids") is None
    assert section_problem("metrics.md", None) == "docs/metrics.md does not exist"
    assert section_problem("scaling.md", "§40") == "docs/scaling.md has no section 40"
    assert section_problem("report.md", "No such heading") == 'docs/report.md has no heading "No such heading"'


# ------------------------------------------------------------ published numbers generated from runs


def _script(path: str):
    """A benchmark script (a path under ROOT) as a module."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)  # registered first: dataclasses look their module up
    return module


def _accuracy_claims():
    """benchmarks/docgen/accuracy_claims.py as a module, and the runs it stored."""
    return (_script("benchmarks/docgen/accuracy_claims.py"),
            json.loads((ROOT / "benchmarks/results/accuracy_claims.json").read_text()))


GENERATED = re.compile(r"<!-- generated: accuracy_claims (\w+) -->\n(.*?)\n<!-- end generated -->", re.S)
#: prose that quotes a generated number: (page, phrase with {mean}, {best}, {worst} in the format given,
#: the cell, its metric); the phrase must appear on the page exactly as the stored runs give it
PROSE = [
    ("docs/results.md", "pima {mean} (seeds {best}–{worst})", "fan_in pmcsa pima", "mean_error_max", ".2f"),
    ("docs/results.md", "heart {mean} (seeds {best}–{worst})", "fan_in pmcsa heart", "mean_error_max", ".2f"),
    ("docs/results.md", "german_numeric {mean} (seeds {best}–{worst})", "fan_in pmcsa german_numeric",
     "mean_error_max", ".2f"),
    ("docs/results.md", "JSA on pima ends {best}–{worst} posterior sds off seed by seed", "meanfield jsa pima",
     "mean_error_max", ".2f"),
    ("docs/results.md", "ELBO ends 67 nats above the full-rank optimum with its\n  means {best}–{worst}",
     "fan_in elbo radon", "mean_error_max", ".2f"),
    ("docs/results.md", "pMCSA's means {best}–{worst} posterior sds off (3 seeds)", "fan_in pmcsa radon lr0.001",
     "mean_error_max", ".2f"),
    ("docs/estimators.md", "{mean} (pima, worst seed {worst})", "fan_in pmcsa pima", "mean_error_max", ".2f"),
    ("docs/estimators.md", "{mean} (heart, worst seed {worst})", "fan_in pmcsa heart", "mean_error_max", ".2f"),
    ("docs/estimators.md", "{mean} (german_numeric, worst seed {worst})", "fan_in pmcsa german_numeric",
     "mean_error_max", ".2f"),
    ("docs/estimators.md", "pMCSA 99–111 nats with its means {best}–{worst}", "fan_in pmcsa radon lr0.001",
     "mean_error_max", ".2f"),
]


def test_the_accuracy_tables_are_the_stored_runs():
    """Every generated table on docs/results.md is what benchmarks/docgen/accuracy_claims.py makes of the
    runs it stored (benchmarks/results/accuracy_claims.json): no number in them is typed by hand."""
    module, results = _accuracy_claims()
    text = (ROOT / "docs/results.md").read_text()
    blocks = GENERATED.findall(text)
    assert {group for group, _ in blocks} == set(module.GROUPS)
    for group, body in blocks:
        assert body == module.table(results, group), f"regenerate: accuracy_claims.py --table --group {group}"


@pytest.mark.parametrize("page, template, key, metric, number", PROSE)
def test_prose_quotes_the_generated_numbers(page, template, key, metric, number):
    module, results = _accuracy_claims()
    stats = module.summary(results[key]["seeds"], metric)
    phrase = template.format(**{name: format(stats[name], number) for name in ("mean", "best", "worst")})
    assert phrase in (ROOT / page).read_text(), phrase


def test_the_prose_check_catches_a_drifted_number():
    module, results = _accuracy_claims()
    stats = module.summary(results["fan_in pmcsa heart"]["seeds"], "mean_error_max")
    assert f"heart {stats['mean'] + 0.01:.2f} (seeds" not in (ROOT / "docs/results.md").read_text()


CHAOTIC = re.compile(r"<!-- generated: chaotic_cells ?(\w*) -->\n(.*?)\n<!-- end generated -->", re.S)


def test_the_chaotic_cells_tables_are_the_stored_runs():
    """docs/results.md's "Chaotic cells across arithmetic" tables are what benchmarks/docgen/chaotic_cells.py
    makes of the runs it stored (benchmarks/results/chaotic_cells.json), one block per table it studied, whose
    published-arithmetic seeds are the committed bundle's, bit for bit: pima's cell and every SNIS and MSC-RB
    cell of the mean-field tables over seeds 0-4, and seed 0 of every averaged cell of the other tables."""
    module = _script("benchmarks/docgen/chaotic_cells.py")
    results = json.loads((ROOT / "benchmarks/results/chaotic_cells.json").read_text())
    text = (ROOT / "docs/results.md").read_text()
    blocks = {name or "meanfield": block for name, block in CHAOTIC.findall(text)}
    assert blocks == {name: module.table(results, name) for name in results["tables"]}, \
        "regenerate: python benchmarks/docgen/chaotic_cells.py table --table NAME"
    bundle = module.bundle_runs()
    for key, entry in results["seeds"].items():
        method, metric = key.split()
        assert entry["published"]["values"][:5] == [bundle[(method, "pima", "meanfield_gaussian", "0.5", seed)][metric]
                                                    for seed in range(5)], key
    for name, table in results["tables"].items():
        bundle = module.bundle_runs(name)
        for cell, entry in table.get("rows", {}).items():  # every SNIS and MSC-RB cell, averaged and last-iterate
            key = tuple(cell.split())
            for metric in module.TABLES[name].metrics:
                compared = [seed for seed in range(5) if (*key, seed) in bundle]
                assert entry[metric]["published"][:len(compared)] == [bundle[(*key, seed)][metric]
                                                                      for seed in compared], cell
        assert all(entry.get("published_equals_bundle", True) for entry in table["screen"].values()), name


def _grid_tables():
    """benchmarks/docgen/grid_tables.py as a module."""
    return _script("benchmarks/docgen/grid_tables.py")


def _health_signals(monkeypatch):
    """benchmarks/measure/health_signals.py as a module."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks/measure"))  # its `harness` import
    return _script("benchmarks/measure/health_signals.py")


def _assert_health_section_shows(module, runs, start: str, end: str) -> None:
    """The section's table is the confusion table of ``runs`` by the true error, row by row, and its
    sentence on the mean error alone gives that table's verdict."""
    text = (ROOT / "docs/reliability.md").read_text()
    section = text[text.index(start):text.index(end)]
    rows = [line for line in section.splitlines() if line.startswith("| ") and " of " in line]
    signals = [*module.SIGNALS, module.VERDICT, module.ANY]
    assert len(rows) == len(signals)
    table = module.confusion(runs)
    for row, signal in zip(rows, signals):
        shown = [tuple(int(n.replace(",", "")) for n in pair) for pair in re.findall(r"([\d,]+) of ([\d,]+)", row)]
        counted = [(table[signal][f"flags_{group}"], table[group]) for group in ("off", "between", "close")]
        assert shown == counted, (signal, shown, counted)
    by_mean = module.confusion(runs, "mean_error")[module.VERDICT]
    totals = module.confusion(runs, "mean_error")
    sentence = (f"By the mean error alone the verdict flags {by_mean['flags_off']:,} of {totals['off']:,} runs "
                f"> 1 sd off and {by_mean['flags_close']:,} of {totals['close']:,} within 0.1 sd")
    assert sentence in " ".join(section.split()), sentence


def test_the_health_table_of_the_pima_grid_is_what_its_runs_give(monkeypatch):
    """docs/reliability.md's table of the health signals on pima is what benchmarks/measure/health_signals.py
    --table counts from its stored runs (benchmarks/results/health_signals.json) by today's bars."""
    module = _health_signals(monkeypatch)
    runs = [module.scored(r) for r in json.loads((ROOT / "benchmarks/results/health_signals.json").read_text())["runs"]]
    _assert_health_section_shows(module, runs, "## What the health signals catch", "**On the wider grids")


def test_the_health_table_of_the_bundles_is_what_their_runs_give(monkeypatch):
    """docs/reliability.md's table of the health signals over the committed grid bundles is what
    benchmarks/measure/health_signals.py --bundles counts from them (k̂ judged again from the stored k̂ at
    today's draws), row by row; and a stored k̂ recomputes from its stored q, from the same number of draws.

    Not bit for bit: the log weights pass through BLAS (L ε, the design matrix times z), whose rounding
    differs between CPUs (AVX-512's kernels give 1.229320088790651 for the 1.229320088790652 stored on AMD).
    A log weight of magnitude |ℓ| ≤ 10⁴ rounds by at most D·ε·|ℓ| ≈ 10⁻¹⁰ (D ≤ 61, ε = 2.2·10⁻¹⁶), and k̂ is
    a smooth function of the weights' tail, so the comparison allows 1e-8: a hundred times that rounding,
    a million times below the 0.01 that moves a verdict."""
    module = _health_signals(monkeypatch)
    runs = module.bundle_runs(sorted((ROOT / "benchmarks/results/grids").glob("*.zip")), module.stored_khat())
    _assert_health_section_shows(module, runs, "**On the wider grids", "## Recovering a store")
    stored = module.stored_khat().values()
    for draws in (KHAT_FIRST_DRAWS, KHAT_DRAWS):  # the smallest q judged from each number of draws
        smallest = min((run for run in stored if run["draws"] == draws), key=lambda run: len(run["params"]))
        khat, recomputed_draws = module.khat_of(smallest)
        assert recomputed_draws == draws and khat == pytest.approx(smallest["khat"], rel=0, abs=1e-8)


def test_the_gp_sections_health_counts_are_what_the_full_rank_runs_give(monkeypatch):
    """docs/results.md's count of the full-rank GP runs run health flags is what today's signals give
    their bundled runs (tags, with k̂ and iterate_sd judged again as benchmarks/measure/health_signals.py
    --bundles does), and how many their own day's tags called ok."""
    from mcsa_bench.tracking.bundle import BundleReader

    module = _health_signals(monkeypatch)
    stored = module.stored_khat()
    counts, tagged_ok = [], 0
    for data in ("classification_sonar", "classification_ionosphere", "classification_breast", "regression_boston",
                 "regression_concrete"):
        path = ROOT / f"benchmarks/results/grids/gp_{data}.zip"
        judged = {run.origin: run for run in module.bundle_runs([path], stored)}
        full_rank = [(run, judged[run.tags.get(module.ORIGIN_TAG, run.run_id)]) for run in BundleReader(path).all_runs
                     if run.tags.get(module.ORIGIN_TAG, run.run_id) in judged
                     and run.params.get("family.name") == "fullrank_gaussian"]
        health = [module.health_of(scored.signals) for _, scored in full_rank]
        counts.append(f"{data.split('_')[1]} {health.count('diverged')} and {health.count('suspect')}")
        tagged_ok += sum(run.tags.get("mcsa_bench.health") == "ok" for run, _ in full_rank)
    sentence = (f"(`diverged` and `suspect`: {', '.join(counts)}); {tagged_ok} of them were tagged `ok` by the code "
                "of their day")
    assert sentence in " ".join((ROOT / "docs/results.md").read_text().split()), sentence


def test_the_grid_tables_are_the_reports_of_their_committed_runs():
    """Every `generated: report` table on docs/results.md is what `mcsa-bench report --bundle` makes of the
    grid's committed bundle (benchmarks/results/grids/), and every bundle there is shown."""
    module = _grid_tables()
    found = module.blocks((ROOT / "docs/results.md").read_text())
    assert {bundle for bundle, *_ in found} == {path.name for path in module.BUNDLES.glob("*.zip")}
    for bundle, metric, rows, body in found:
        assert body == module.table(bundle, metric, rows), "regenerate: python benchmarks/docgen/grid_tables.py --write"


def test_a_grid_table_typed_over_is_seen():
    """A number changed by hand in a generated table no longer matches what regenerating it gives."""
    module = _grid_tables()
    text = (ROOT / "docs/results.md").read_text()
    bundle, metric, rows, body = module.blocks(text)[0]
    drifted = text.replace(body, body.replace("[", "[1", 1))
    assert module.blocks(drifted)[0][3] != module.table(bundle, metric, rows)


MCSA_AND_SNIS = ("pMCSA", "JSA", "MSC", "MSC-RB", "SNIS")
ALL = (*MCSA_AND_SNIS, "ELBO (N=1)")
MCSA = MCSA_AND_SNIS[:4]
ALL_ELBO_PLAIN = (*MCSA_AND_SNIS, "ELBO")  # ELBO's name where the grid ran method=elbo_n1 without its label
FAMILIES = ["fullrank_gaussian", "meanfield_gaussian", "meanfield_student_t"]
EIGHT_SCHOOLS_GAUSSIAN_AVERAGED = {centred: [f"{centred}, {family}, 0.5" for family in FAMILIES[:2]]
                                   for centred in ("True", "False")}
FUNNEL_GAUSSIAN = [f"{family}, {avg}" for family in FAMILIES[:2] for avg in ("0.5", "–")]
LOGISTIC_DATA = ("Pima Indians", "heart disease", "German credit")
STD_MEANFIELD_AVERAGED = [f"{data}, meanfield_gaussian, 0.5" for data in LOGISTIC_DATA]
CONCRETE_MEANFIELD = [f"{family}, {avg}" for family in FAMILIES[1:] for avg in ("0.5", "–")]
CONCRETE_FULLRANK = [f"fullrank_gaussian, {avg}" for avg in ("0.5", "–")]
SONAR_FAN_IN_001 = ["0.01, 0.5", "0.01, –"]
SONAR_FAN_IN_0001 = ["0.001, 0.5", "0.001, –"]
RADON_0001 = ["0.001, 0.5", "0.001, –"]
RADON_FULLRANK = {form: [f"radon, {form}, {avg}" for avg in ("0.5", "–")]
                  for form in ("absolute", "relative", "fan_in")}
#: prose that quotes generated grid tables: (phrase with {0}, {1}, ... each a number or a "low–high" range
#: of table means, in the format given; per placeholder the bundle, metric, rows and methods it spans)
GRID_PROSE = [
    ("the MCSA schemes and SNIS {0} nats with the mean-field Gaussian", ".1f",
     [("gp_classification_ionosphere.zip", "excess_inclusive_kl", ["meanfield_gaussian, 0.5"], MCSA_AND_SNIS)]),
    ("{0} with the Student-t, ELBO {1} and {2}", ".1f",
     [("gp_classification_ionosphere.zip", "excess_inclusive_kl", ["meanfield_student_t, 0.5"], MCSA_AND_SNIS),
      ("gp_classification_ionosphere.zip", "excess_inclusive_kl", ["meanfield_gaussian, 0.5"], ["ELBO (N=1)"]),
      ("gp_classification_ionosphere.zip", "excess_inclusive_kl", ["meanfield_student_t, 0.5"], ["ELBO (N=1)"])]),
    ("SNIS {0} and ELBO {1}", ".0f",
     [("gp_classification_breast.zip", "excess_inclusive_kl", ["meanfield_gaussian, 0.5"], ["SNIS"]),
      ("gp_classification_breast.zip", "excess_inclusive_kl", ["meanfield_gaussian, 0.5"], ["ELBO (N=1)"])]),
    ("SNIS are within {0} nats of the optimum**\n  once averaged, ELBO {1}", ".0f",
     [("gp_classification_sonar.zip", "excess_inclusive_kl", ["meanfield_gaussian, 0.5", "meanfield_student_t, 0.5"],
       MCSA_AND_SNIS),
      ("gp_classification_sonar.zip", "excess_inclusive_kl", ["meanfield_gaussian, 0.5", "meanfield_student_t, 0.5"],
       ["ELBO (N=1)"])]),
    ("The MCSA schemes end {0}", ".0f",
     [("stochastic_volatility_sp500.zip", "ref_mean_error_max", ["meanfield_gaussian, 0.5", "meanfield_gaussian, –",
       "meanfield_student_t, 0.5", "meanfield_student_t, –"], MCSA)]),
    ("SNIS ends {0} sds off", ".0f",
     [("stochastic_volatility_sp500.zip", "ref_mean_error_max", ["meanfield_gaussian, 0.5", "meanfield_gaussian, –",
       "meanfield_student_t, 0.5", "meanfield_student_t, –"], ["SNIS"])]),
    ("every MCSA scheme ends within {0} nats of its family's optimum", ".2f",
     [("logistic_standardized.zip", "excess_inclusive_kl", STD_MEANFIELD_AVERAGED, MCSA)]),
    ("Their largest mean\n  error is {0} posterior sds", ".2f",
     [("logistic_standardized.zip", "ref_mean_error_max", STD_MEANFIELD_AVERAGED, MCSA)]),
    ("their largest |log sd ratio| {0} (sds", ".2f",
     [("logistic_standardized.zip", "ref_log_sd_ratio_max", STD_MEANFIELD_AVERAGED, MCSA)]),
    ("(average rank {0} and {1} of 6 in\n  excess KL over the 18 rows, SNIS {2}, pMCSA {3})", ".2f",
     [("logistic_standardized.zip", "excess_inclusive_kl", ["average rank"], [method])
      for method in ("JSA", "MSC-RB", "SNIS", "pMCSA")]),
    ("pMCSA, JSA and MSC-RB {0}; SNIS", ".1f",
     [("logistic_standardized.zip", "excess_inclusive_kl", ["German credit, fullrank_gaussian, 0.5"],
       ["pMCSA", "JSA", "MSC-RB"])]),
    ("SNIS {0}; ELBO {1}. Without", ".2f",
     [("logistic_standardized.zip", "excess_inclusive_kl", ["German credit, fullrank_gaussian, 0.5"], [method])
      for method in ("SNIS", "ELBO (N=1)")]),
    ("ELBO with the Student-t family** ends {0} nats", ".0f",
     [("logistic_standardized.zip", "excess_inclusive_kl",
       [f"{data}, meanfield_student_t, {avg}" for data in LOGISTIC_DATA for avg in ("0.5", "–")], ["ELBO (N=1)"])]),
    ("MCSA schemes end {0} nats above the optimum with the Gaussian and Student-t mean-field", ".2f",
     [("logistic_german_gaussian_prior.zip", "excess_inclusive_kl",
       ["meanfield_gaussian, 0.5", "meanfield_student_t, 0.5"], MCSA)]),
    ("families, means within {0} sds; with the full-rank family JSA and MSC-RB {1} nats,\n  pMCSA {2}, "
     "MSC {3}, SNIS {4}, ELBO {5} (first", ".2f",
     [("logistic_german_gaussian_prior.zip", "ref_mean_error_max",
       ["meanfield_gaussian, 0.5", "meanfield_student_t, 0.5"], MCSA),
      ("logistic_german_gaussian_prior.zip", "excess_inclusive_kl", ["fullrank_gaussian, 0.5"], ["JSA", "MSC-RB"])]
     + [("logistic_german_gaussian_prior.zip", "excess_inclusive_kl", ["fullrank_gaussian, 0.5"], [method])
        for method in ("pMCSA", "MSC", "SNIS", "ELBO (N=1)")]),
    ("optimum**: {0} nats averaged with the\n  Gaussian families, means within {1} posterior sds", ".2f",
     [("eight_schools.zip", "excess_inclusive_kl", EIGHT_SCHOOLS_GAUSSIAN_AVERAGED["False"], MCSA_AND_SNIS),
      ("eight_schools.zip", "ref_mean_error_max", EIGHT_SCHOOLS_GAUSSIAN_AVERAGED["False"], MCSA_AND_SNIS)]),
    ("|log sd ratio| {0}). With the Student-t", ".2f",
     [("eight_schools.zip", "ref_log_sd_ratio_max", EIGHT_SCHOOLS_GAUSSIAN_AVERAGED["False"], MCSA_AND_SNIS)]),
    ("ELBO stays at its exclusive optimum, {0} nats ({1}\n  with the Student-t)", ".2f",
     [("eight_schools.zip", "excess_inclusive_kl", [f"False, {family}, {avg}" for family in families
                                                    for avg in ("0.5", "–")], ["ELBO"])
      for families in (FAMILIES[:2], FAMILIES[2:])]),
    ("end {0} nats above it with the mean-field Gaussian, {1}\n  with the Student-t, and {2} with", ".2f",
     [("eight_schools.zip", "excess_inclusive_kl", [f"True, {family}, 0.5"], family_methods)
      for family, family_methods in zip(FAMILIES[1:] + FAMILIES[:1], (MCSA, MCSA, ["JSA", "MSC", "MSC-RB"]))]),
    ("largest mean error is {0} posterior sds, and their largest |log sd ratio| is {1}.", ".2f",
     [("eight_schools.zip", metric, [f"True, {family}, 0.5" for family in FAMILIES], MCSA)
      for metric in ("ref_mean_error_max", "ref_log_sd_ratio_max")]),
    ("averaged, is {0} (pima), {1} (heart), {2}\n(german_numeric) and {3} (radon)", ".2f",
     [("posterior_accuracy_meanfield.zip", "ref_mean_error_max", [f"{data}, meanfield_gaussian, 0.5"], ["pMCSA"])
      for data in (*LOGISTIC_DATA, "radon")]),
    ("with the Student-t\non the logistic data; JSA's, MSC's and MSC-RB's {0} on heart", ".2f",
     [("posterior_accuracy_meanfield.zip", "ref_mean_error_max",
       [f"{data}, {family}, 0.5" for data in LOGISTIC_DATA[1:] for family in FAMILIES[1:]], ["JSA", "MSC", "MSC-RB"])]),
    ("but {0}\non pima and {1} on radon", ".1f",
     [("posterior_accuracy_meanfield.zip", "ref_mean_error_max", [f"{data}, {family}, 0.5" for family in FAMILIES[1:]],
       ["JSA", "MSC", "MSC-RB"]) for data in ("Pima Indians", "radon")]),
    ("every method's is {0} on radon", ".1f",
     [("posterior_accuracy_meanfield.zip", "ref_log_sd_ratio_max", [f"radon, {family}, {avg}" for family in FAMILIES[1:]
                                                                   for avg in ("0.5", "–")], ALL)]),
    ("SNIS's means (averaged)\n  from {0} sds to {1};", ".0f",
     [("posterior_accuracy_fullrank.zip", "ref_mean_error_max", [f"{data}, {form}, 0.5" for data in LOGISTIC_DATA],
       ["SNIS"]) for form in ("relative", "fan_in")]),
    ("averaging it ends {0} nats of excess KL above the optimum on the logistic data ({1} on radon)", ".0f",
     [("posterior_accuracy_meanfield.zip", "excess_inclusive_kl",
       [f"{data}, meanfield_gaussian, 0.5" for data in datas], ["pMCSA"]) for datas in (LOGISTIC_DATA, ["radon"])]),
    ("(excess {0} nats on the logistic\n  data, {1} on radon with the Student-t", ".0f",
     [("posterior_accuracy_meanfield.zip", "excess_inclusive_kl",
       [f"{data}, {family}, 0.5" for data in LOGISTIC_DATA for family in FAMILIES[1:]], ["SNIS"]),
      ("posterior_accuracy_meanfield.zip", "excess_inclusive_kl", ["radon, meanfield_student_t, 0.5"], ["SNIS"])]),
    ("That is where SNIS and ELBO end ({0} nats;", ".0f",
     [("funnel.zip", "excess_inclusive_kl", FUNNEL_GAUSSIAN, ["SNIS", "ELBO"])]),
    ("their means within\n  {0} posterior sds", ".2f",
     [("funnel.zip", "ref_mean_error_max", FUNNEL_GAUSSIAN, ["SNIS", "ELBO"])]),
    ("brings every method within {0} nats of its family's optimum", ".0f",
     [("funnel.zip", "excess_inclusive_kl", ["meanfield_student_t, 0.5", "meanfield_student_t, –"], ALL_ELBO_PLAIN)]),
    ("stays at\n  {0} for every method ({1} with the Gaussian families)", ".1f",
     [("funnel.zip", "ref_log_sd_ratio_max", [f"{family}, {avg}" for family in families for avg in ("0.5", "–")],
       ALL_ELBO_PLAIN) for families in (FAMILIES[2:], FAMILIES[:2])]),
    ("cuts the excess KL from {0} nats to {1}", ",.0f",
     [("gp_regression_boston.zip", "excess_inclusive_kl", ["meanfield_gaussian, 0.5", "meanfield_gaussian, –"], ALL),
      ("gp_regression_boston.zip", "excess_inclusive_kl", ["meanfield_student_t, 0.5", "meanfield_student_t, –"],
       ALL)]),
    ("The\n  largest mean errors, {0} posterior sds", ".1f",
     [("gp_regression_boston.zip", "ref_mean_error_max", ["meanfield_gaussian, 0.5", "meanfield_gaussian, –",
       "meanfield_student_t, 0.5", "meanfield_student_t, –"], ALL)]),
    ("means {0} posterior sds off (seeds", ".0f",
     [("gp_regression_boston.zip", "ref_mean_error_max", ["fullrank_gaussian, 0.5", "fullrank_gaussian, –"], ALL)]),
    *[(phrase, number, [("gp_regression_concrete.zip", metric, rows, methods)])
      for phrase, number, metric, rows, methods in [
        ("Excess KL {0} nats with the mean-field Gaussian", ",.0f", "excess_inclusive_kl", CONCRETE_MEANFIELD[:2], ALL),
        ("and {0} with the Student-t, for every method", ".0f", "excess_inclusive_kl", CONCRETE_MEANFIELD[2:], ALL),
        ("The largest mean error is {0} posterior sds", ".1f", "ref_mean_error_max", CONCRETE_MEANFIELD, ALL),
        ("the largest\n|log sd ratio| {0}.", ".2f", "ref_log_sd_ratio_max", CONCRETE_MEANFIELD, ALL),
        ("end {0} nats above the optimum averaged", ".3g", "excess_inclusive_kl", ["fullrank_gaussian, 0.5"], MCSA),
        ("({0} from the last iterate), SNIS and ELBO", ".3g", "excess_inclusive_kl", ["fullrank_gaussian, –"], MCSA),
        ("SNIS and ELBO\n{0};", ".0e", "excess_inclusive_kl", CONCRETE_FULLRANK, ["SNIS", "ELBO (N=1)"]),
        ("the means are {0} posterior sds off for the MCSA schemes", ".0f", "ref_mean_error_max", CONCRETE_FULLRANK,
         MCSA),
        ("and {0} for\nSNIS and ELBO", ".0f", "ref_mean_error_max", CONCRETE_FULLRANK, ["SNIS", "ELBO (N=1)"])]],
    ("averaged: ELBO ends {0} nats above the\n  full-rank optimum (its mean-field fit: 25), SNIS {1}, against", ".0f",
     [("gp_classification_sonar_fan_in.zip", "excess_inclusive_kl", ["0.01, 0.5"], [method])
      for method in ("ELBO (N=1)", "SNIS")]),
    ("SNIS 30, against {0} and {1} with the\n  relative form", ".0e",
     [("gp_classification_sonar.zip", "excess_inclusive_kl", ["fullrank_gaussian, 0.5"], [method])
      for method in ("ELBO (N=1)", "SNIS")]),
    ("means are {0} posterior sds off instead of {1}", ".1f",
     [("gp_classification_sonar_fan_in.zip", "ref_mean_error_max", SONAR_FAN_IN_001, MCSA),
      ("gp_classification_sonar.zip", "ref_mean_error_max", ["fullrank_gaussian, 0.5", "fullrank_gaussian, –"], MCSA)]),
    ("(pMCSA's {0} is the lowest", ".2f",
     [("gp_classification_sonar_fan_in.zip", "ref_mean_error_max", SONAR_FAN_IN_001, ["pMCSA"])]),
    ("largest |log sd ratio| is {0} instead of", ".1f",
     [("gp_classification_sonar_fan_in.zip", "ref_log_sd_ratio_max", SONAR_FAN_IN_001, MCSA)]),
    ("stays at {0} nats: fan_in", ",.0f",
     [("gp_classification_sonar_fan_in.zip", "excess_inclusive_kl", ["0.01, 0.5"], MCSA)]),
    ("Excess KL, averaged /\n  last iterate: pMCSA {0} / {1}, JSA {2} / {3}, MSC {4} / {5}, MSC-RB {6} / {7}, "
     "SNIS {8} / {9},\n  ELBO {10} / {11} nats", ".1f",
     [("gp_classification_sonar_fan_in.zip", "excess_inclusive_kl", [row], [method])
      for method in ALL for row in SONAR_FAN_IN_0001]),
    ("the MCSA schemes' means are {0} posterior sds\n  off (SNIS {1}, ELBO {2})",
     ".1f", [("gp_classification_sonar_fan_in.zip", "ref_mean_error_max", SONAR_FAN_IN_0001, methods)
             for methods in (MCSA, ["SNIS"], ["ELBO (N=1)"])]),
    ("their largest |log sd ratio| {0}, and their IMH chains accept", ".2f",
     [("gp_classification_sonar_fan_in.zip", "ref_log_sd_ratio_max", SONAR_FAN_IN_0001, MCSA)]),
    ("every scheme ends {0} nats above the full-rank optimum", ".1f",
     [("gp_classification_sonar_fan_in.zip", "excess_inclusive_kl", SONAR_FAN_IN_0001, MCSA)]),
    *[(phrase, number, [("posterior_accuracy_fullrank.zip", metric, rows, methods) for rows, methods in spans])
      for phrase, number, metric, spans in [
        ("least accurate in the papers' form ({0} sds) and the most accurate in\n  the relative one ({1})", ".0f",
         "ref_mean_error_max", [(RADON_FULLRANK["absolute"], ["ELBO (N=1)"]),
                                (RADON_FULLRANK["relative"], ["ELBO (N=1)"])]),
        ("diverges for every MCSA scheme** (means {0} sds off)", ".0f", "ref_mean_error_max",
         [([f"{data}, absolute, {avg}" for data in (*LOGISTIC_DATA, "radon") for avg in ("0.5", "–")], MCSA)]),
        ("SNIS 164 nats and 1.0 sd, against {0} and {1} nats\n  with the relative form", ".0e", "excess_inclusive_kl",
         [(RADON_FULLRANK["relative"][:1], ["ELBO (N=1)"]), (RADON_FULLRANK["relative"][:1], ["SNIS"])]),
        ("but their excess KL stays at\n  {0} nats", ".1e", "excess_inclusive_kl",
         [(RADON_FULLRANK["fan_in"], MCSA)])]],
    *[(phrase, number, [("posterior_accuracy_radon_fan_in_lr0001.zip", metric, rows, methods)
                        for metric, rows, methods in spans])
      for phrase, number, spans in [
        ("pMCSA {0} / {1} nats, JSA, MSC and MSC-RB {2},\n  SNIS {3}, ELBO {4};", ".0f",
         [("excess_inclusive_kl", RADON_0001[:1], ["pMCSA"]), ("excess_inclusive_kl", RADON_0001[1:], ["pMCSA"]),
          ("excess_inclusive_kl", RADON_0001, ["JSA", "MSC", "MSC-RB"]),
          ("excess_inclusive_kl", RADON_0001, ["SNIS"]), ("excess_inclusive_kl", RADON_0001, ["ELBO (N=1)"])]),
        ("pMCSA's means {0} posterior sds off averaged (5 seeds)", ".2f",
         [("ref_mean_error_max", RADON_0001[:1], ["pMCSA"])]),
        ("the other\n  MCSA schemes' {0}, SNIS's", ".1f",
         [("ref_mean_error_max", RADON_0001, ["JSA", "MSC", "MSC-RB"])]),
        ("SNIS's {0} and ELBO's, slow at this step, {1}.", ".0f",
         [("ref_mean_error_max", RADON_0001, ["SNIS"]), ("ref_mean_error_max", RADON_0001, ["ELBO (N=1)"])]),
        ("pMCSA's full-rank fit ({0} nats above\n  its optimum)", ".0f",
         [("excess_inclusive_kl", RADON_0001[:1], ["pMCSA"])]),
        ("largest |log sd ratio| stays at {0} for the MCSA schemes", ".1f",
         [("ref_log_sd_ratio_max", RADON_0001, MCSA)]),
        ("SNIS's full-rank fan_in fit at Adam 0.001 comes to {0}, with", ".1f",
         [("ref_log_sd_ratio_max", RADON_0001, ["SNIS"])]),
        ("with\n  its means {0} sds off)", ".0f", [("ref_mean_error_max", RADON_0001, ["SNIS"])]),
        ("on radon pMCSA {0} nats with its means", ".0f", [("excess_inclusive_kl", RADON_0001, ["pMCSA"])])]],
    ("mean-field fit ({0} above its own)", ".0f",
     [("posterior_accuracy_meanfield.zip", "excess_inclusive_kl", ["radon, meanfield_gaussian, 0.5"], ["pMCSA"])]),
    ("pMCSA with the relative form at\n  0.01: {0} nats", ".1e",
     [("posterior_accuracy_fullrank.zip", "excess_inclusive_kl", RADON_FULLRANK["relative"], ["pMCSA"])]),
    ("0.01: 1.0e+06–6.7e+06 nats, {0} sds)", ".0f",
     [("posterior_accuracy_fullrank.zip", "ref_mean_error_max", RADON_FULLRANK["relative"], ["pMCSA"])]),
    *[(phrase, number, [(bundle, "excess_inclusive_kl", rows, ["ELBO (N=1)", "SNIS"])])
      for phrase, number, bundle, rows in [
        ("ELBO's and SNIS's\n  {0} nats into", ".0e", "posterior_accuracy_fullrank.zip",
         RADON_FULLRANK["relative"][:1]),
        ("nats into {0} on radon and", ".0f", "posterior_accuracy_fullrank.zip", RADON_FULLRANK["fan_in"][:1]),
        ("on radon and {0} into", ".0e", "gp_classification_sonar.zip", ["fullrank_gaussian, 0.5"]),
        ("into {0} on GP sonar", ".0f", "gp_classification_sonar_fan_in.zip", ["0.01, 0.5"])]],
    ("with the mean-field Gaussian it ends {0} sds off", ".0f",
     [("stochastic_volatility_sp500.zip", "ref_mean_error_max", ["meanfield_gaussian, 0.5"], ["ELBO (N=1)"])]),
]


def _table_means(table: str) -> dict[tuple[str, str], float]:
    """(row, method) -> the mean a generated table shows (bold and interval left out)."""
    header, _, *rows = table.splitlines()
    methods = [cell.strip() for cell in header.strip("|").split("|")][1:]
    means = {}
    for row in rows:
        label, *cells = [cell.strip() for cell in row.strip("|").split("|")]
        for method, cell in zip(methods, cells):
            number = cell.replace("*", "").split(" ")[0]
            if number not in ("", "—"):
                means[label, method] = float(number)
    return means


@pytest.mark.parametrize("template, number, spans", GRID_PROSE, ids=[phrase for phrase, *_ in GRID_PROSE])
def test_grid_prose_quotes_the_generated_tables(template, number, spans):
    """A number or range the accuracy sections' prose (and docs/estimators.md's claims about them) quotes is
    what the generated table shows."""
    blocks = {(bundle, metric): body for bundle, metric, _, body in
              _grid_tables().blocks((ROOT / "docs/results.md").read_text())}
    quoted = []
    for bundle, metric, rows, methods in spans:
        means = _table_means(blocks[bundle, metric])
        values = [means[row, method] for row in rows for method in methods]
        low, high = format(min(values), number), format(max(values), number)
        quoted.append(low if low == high else f"{low}–{high}")
    phrase = template.format(*quoted)
    assert any(phrase in (ROOT / page).read_text() for page in ("docs/results.md", "docs/estimators.md")), phrase


@pytest.mark.slow
def test_the_accuracy_runs_rerun_on_a_small_slice(tmp_path):
    """CI's slice of benchmarks/docgen/accuracy_claims.py: two cells, 2 seeds, T = 200, through the
    script's command line into a JSON its tables read."""
    import json
    import subprocess
    import sys

    out = tmp_path / "claims.json"
    cells = ["fan_in pmcsa heart", "radon noncentred pmcsa"]
    subprocess.run([sys.executable, str(ROOT / "benchmarks/docgen/accuracy_claims.py"), "--size", "smoke",
                    "--out", str(out), "--cells", *cells], check=True, cwd=tmp_path, timeout=600,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    results = json.loads(out.read_text())
    assert list(results) == cells and all(len(results[key]["seeds"]) == 2 for key in cells)
    module, _ = _accuracy_claims()
    assert "| radon noncentred pmcsa | 2 | 200 |" in module.table(results, "radon")
