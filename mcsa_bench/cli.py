"""The ``mcsa-bench`` command: run | plugins | check | report | ui | runs | sync | export | merge | server |
references.

User mistakes (unknown component, bad type, incompatible pair, bad budget, ...) are one line on
stderr and exit code 2, found by composing and building every job of a run or sweep *before*
anything runs or is tracked. Hydra and MLflow are imported only by the commands that need them.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable

from mcsa_bench.api import ConfigurationError, MCSAError, did_you_mean
from mcsa_bench.version import __version__

USAGE = """\
usage: mcsa-bench <command> [arguments]

Benchmark Markov chain score ascent (inclusive-KL variational inference with MCMC gradients).

commands:
  run [-m] [overrides ...]      run one configuration, or with -m sweep every combination
                                (Hydra overrides: estimator=jsa model.dim=50 seed=0,1,2)
  plugins [--json]              list every component by kind, with plugin, distribution, version,
                                and the plugins that failed to load, with the reason
  check <kind> <name> [--json]  run a component's conformance checks (mcsa-bench check --help)
  ui [overrides ...] [--port N] start the MLflow UI on 127.0.0.1 for the configured store and print the
                                address of the experiment's runs (--experiment NAME)
  runs [filters] [--fix-stale]  list the job runs: status, method, model, health, accuracy, metrics
                                (--help); --fix-stale marks runs whose process is gone KILLED
  sync DIR ... [tracking.uri=]  upload runs kept on local disk (a tracking server that went away)
  report [--sweep ID|latest]    the papers' tables and figures from the tracked runs (--help)
  export [--sweep ID|latest]    a sweep's or an experiment's runs as one bundle file; --format arviz:
                                runs' final q as draws in ArviZ's netCDF (--help)
  merge BUNDLE ... [tracking.uri=]  copy bundles' runs into a store; merging again adds nothing
  server [--host H] [--port N]  a shared MLflow tracking server on a database, for a cluster (--help)
  references [--json]           the reference posteriors every run on their model is scored against

`mcsa-bench run --help` lists config groups, options and keys.  Version {version}.
"""

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"mcsa-bench: error: {message}", file=sys.stderr)
    return code


# ----------------------------------------------------------------------------------- plugins


def plugins_command(argv: list[str]) -> int:
    if argv not in ([], ["--json"]):
        return fail(f"plugins takes only --json, got {' '.join(argv)}")
    import warnings

    from mcsa_bench.plugins import PluginWarning, get_registry

    with warnings.catch_warnings():  # failures are part of the listing below
        warnings.simplefilter("ignore", PluginWarning)
        registry = get_registry()
        registry.load_deprecated_twins()  # a plugin still on the old twin group: its twins are backends too
    rows = [
        {
            "kind": c.kind,
            "name": c.name,
            "plugin": c.plugin.name,
            "distribution": c.plugin.distribution,
            "version": c.plugin.version,
            "status": "loaded",
            "backends": list(c.backends),
            "description": c.description,
            "parameters": {n: (None if p.default is p.empty else p.default) for n, p in c.parameters().items()},
        }
        for c in registry.components()
    ]
    problems = [
        {"kind": f.kind, "name": None, "plugin": f.plugin.name, "distribution": f.plugin.distribution,
         "version": f.plugin.version, "status": "failed", "stage": f.stage, "error": f.reason}
        for f in registry.failures
    ] + [
        {"kind": None, "name": None, "plugin": p.name, "distribution": p.distribution, "version": p.version,
         "status": "disabled", "stage": "load", "error": "not in MCSA_BENCH_PLUGINS"}
        for p in registry.disabled
    ]
    if argv == ["--json"]:
        print(json.dumps(rows + problems, indent=2, default=repr))
        return 0
    header = ("KIND", "NAME", "PLUGIN", "DISTRIBUTION", "BACKENDS", "DESCRIPTION")
    table = [(r["kind"], r["name"], r["plugin"], _distribution(r), ",".join(r["backends"]), r["description"])
             for r in rows]
    _print_table(header, table)
    if problems:
        print(f"\nplugins not loaded ({len(problems)}):")
        _print_table(("PLUGIN", "DISTRIBUTION", "STATUS", "STAGE", "REASON"),
                     [(p["plugin"], _distribution(p), p["status"], p["stage"], p["error"]) for p in problems])
    return 0


def _distribution(row: dict) -> str:
    return f"{row['distribution'] or '-'} {row['version'] or ''}".strip()


def _print_table(header: tuple[str, ...], table: list[tuple[str, ...]]) -> None:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header) - 1)]
    for row in [header, *table]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])


# ---------------------------------------------------------------------------------------- run


def run_help() -> str:
    from mcsa_bench.engine import table
    from mcsa_bench.jobs.config import RunSettings, default_choices, shipped_defaults, shipped_yaml
    from mcsa_bench.plugins import KINDS, get_registry, literal_choices

    registry = get_registry()
    lines = [
        "usage: mcsa-bench run [-m] [group=option ...] [key=value ...] [Hydra flags]",
        "",
        "Runs one configuration; with -m/--multirun, every combination of comma-separated values,",
        "one MLflow run per job, nested under a parent run for the sweep.",
        "",
        "examples:",
        "  mcsa-bench run estimator=jsa model.dim=50 optimizer.lr=0.005",
        "  mcsa-bench run -m model=gaussian model.dim=10 estimator=msc,msc_rb,jsa,pmcsa seed=0,1 n_iters=2000",
        "  mcsa-bench run -m experiment=logistic_pima size=tiny seed=0,1,2 hydra/launcher=joblib",
        "  mcsa-bench run --cfg job estimator=msc      # print the composed config, run nothing",
        "",
        "top-level keys (default, meaning):",
    ]
    rows = table(RunSettings)
    width = max(len(f"{row.key}={row.default}") for row in rows)
    lines += [f"  {f'{row.key}={row.default}':<{width}}  {row.doc}" for row in rows]
    lines += ["", "config groups (group=option; option parameters as group.key=value):"]
    defaults = default_choices()
    for kind in KINDS:
        choice = defaults.get(kind) or "the estimator's default"
        lines.append(f"  {kind} (default: {choice})")
        for component in registry.components(kind):
            params = {n: "???" if p.default is p.empty else p.default for n, p in component.parameters().items()}
            params.update(shipped_defaults(kind, component.name))
            choices = {n: literal_choices(p.annotation) for n, p in component.parameters().items()}
            shown = " ".join(f"{n}={v}" + (f" (one of {'|'.join(map(str, choices[n]))})" if choices.get(n) else "")
                             for n, v in params.items())
            if kind == "estimator":
                scheme = component.factory
                kernel = f"kernel {scheme.default_kernel} by default" if scheme.default_kernel else "no kernel"
                shown = f"[{kernel}; n_samples >= {scheme.min_samples}] {shown}"
            lines.append(f"    {component.name:<22} {shown}".rstrip())
    for group in ("experiment", "method", "size"):
        options = ", ".join(sorted(shipped_yaml(group)))
        lines.append(f"  {group}: {options}")
    lines += [
        "",
        "Hydra flags: --cfg job|hydra|all, --info, --hydra-help, -cd DIR (add a config directory),",
        "  hydra/launcher=joblib (parallel jobs; extra 'parallel'), see docs/scaling.md for clusters.",
    ]
    return "\n".join(lines)


def run_command(argv: list[str]) -> int:
    from mcsa_bench.jobs.composition import hydra_args_parser
    from mcsa_bench.jobs.config import check_command_line, register_configs
    from mcsa_bench.jobs.launch import call_hydra, launch
    from mcsa_bench.plugins import get_registry

    parser = hydra_args_parser()
    parser.prog = "mcsa-bench run"
    parser.error = _refuse_flags  # one line, not argparse's usage and error
    args = parser.parse_args(argv)
    if args.help:
        print(run_help())
        return 0
    if args.config_path is not None or args.config_name is not None:
        return fail("--config-path/--config-name are not supported; add configs with --config-dir DIR "
                    "and select them with group=option")
    register_configs(get_registry())
    if args.cfg == "job" and not args.package:
        return print_job_config(args)
    if args.hydra_help or args.cfg or args.info or args.shell_completion:  # Hydra's own output, of a checked command
        check_command_line(args.overrides, args.config_dir)
        call_hydra(argv)
        return 0
    return launch(args.overrides, argv, multirun=args.multirun, config_dir=args.config_dir)


def _refuse_flags(message: str):
    raise ConfigurationError(f"{message} (mcsa-bench run --help lists the flags)")


def print_job_config(args) -> int:
    """`--cfg job`: the first job's resolved config, with the kernel that will run filled in."""
    from omegaconf import OmegaConf

    from mcsa_bench.jobs.config import RunSettings, compose
    from mcsa_bench.plugins import get_registry

    (_, cfg), *_ = compose(args.overrides, multirun=args.multirun, config_dir=args.config_dir).jobs
    print(OmegaConf.to_yaml(OmegaConf.create(RunSettings.from_config(cfg).effective_config(get_registry()))), end="")
    return 0


# ----------------------------------------------------------------------------------------- ui


def ui_command(argv: list[str]) -> int:
    """Serve the MLflow UI for the configured store on 127.0.0.1, quietly, until Ctrl-C, and print the address of
    the experiment's runs table (``--experiment NAME``, default mcsa-bench)."""
    options = {"--port": "5000", "--experiment": None}
    for option in options:
        if option in argv:
            index = argv.index(option)
            if index + 1 >= len(argv) or (option == "--port" and not argv[index + 1].isdigit()):
                return fail("--port needs a number, e.g. --port 5001" if option == "--port"
                            else "--experiment needs a name, e.g. --experiment mcsa-bench")
            options[option] = argv[index + 1]
            argv = argv[:index] + argv[index + 2:]
    port = int(options["--port"])
    from mcsa_bench.tracking.store import (
        DEFAULT_EXPERIMENT,
        absolute_uri,
        check_integrity,
        check_tracking_uri,
        store_exists,
        tracking_uri_of,
    )
    from mcsa_bench.tracking.ui import serve

    uri = tracking_uri_of(argv, "ui")
    check_tracking_uri(uri)
    if uri.startswith(("http://", "https://")):
        print(f"The configured store is a tracking server: open {uri} in a browser.")
        return 0
    if not store_exists(uri):
        return fail(f"no MLflow store at {absolute_uri(uri)}: run an experiment first, or name an existing store "
                    f"with tracking.uri=sqlite:////path/to/mlflow.db")
    check_integrity(uri)
    from mcsa_bench.report.listing import runs_view

    experiment = options["--experiment"] or DEFAULT_EXPERIMENT
    page = runs_view(uri, experiment)
    if page is None:
        print(f"No experiment {experiment!r} in the store; the UI lists the experiments there.")
    return serve(absolute_uri(uri), port, page=page or "")


# --------------------------------------------------------------------------------------- runs


def runs_command(argv: list[str]) -> int:
    """`mcsa-bench runs`: the store's job runs as a table, with filters (report/listing.py); with --fix-stale, mark
    RUNNING runs whose process is gone KILLED."""
    from mcsa_bench.report.listing import list_runs, parser
    from mcsa_bench.tracking.store import (
        absolute_uri,
        check_tracking_uri,
        mark_stale_runs,
        store_exists,
        tracking_uri_of,
    )

    try:
        args = parser().parse_intermixed_args(argv)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    uri = tracking_uri_of(args.overrides, "runs")
    check_tracking_uri(uri)
    if not store_exists(uri):
        return fail(f"no MLflow store at {absolute_uri(uri)}; run something first, or name the store with "
                    "tracking.uri=sqlite:////path/to/mlflow.db")
    if not args.fix_stale:
        return list_runs(args, uri)
    marked = mark_stale_runs(uri)
    for run, reason in marked:
        print(f"KILLED {run.info.run_id} {run.info.run_name}: {reason}")
    print(f"{len(marked)} stale run(s) marked KILLED in {absolute_uri(uri)}")
    return 0


# --------------------------------------------------------------------------------------- sync


def sync_command(argv: list[str]) -> int:
    """`mcsa-bench sync DIR ... [tracking.uri=...]`: upload runs kept on local disk."""
    directories = [a for a in argv if "=" not in a]
    overrides = [a for a in argv if "=" in a]
    if not directories:
        return fail("sync needs the output directories of runs, e.g. mcsa-bench sync outputs/runs/2026-11-21/12-00-00")
    from mcsa_bench.tracking.store import tracking_uri_of
    from mcsa_bench.tracking.sync import sync_directory

    uri = tracking_uri_of(overrides, "sync") if overrides else None  # else the store each run.json names
    for directory in directories:
        print(sync_directory(directory, uri))
    return 0


# ------------------------------------------------------------------------------------- report


def report_command(argv: list[str]) -> int:
    """`mcsa-bench report`: the report reads the store; for stores written by older versions it is given
    today's configs and plugins to rebuild what they lack (mcsa_bench.jobs.reconstruction)."""
    from mcsa_bench.jobs.reconstruction import TodaysConfigs
    from mcsa_bench.report import report_command as report

    return report(argv, TodaysConfigs())


# ----------------------------------------------------------------------------- export, merge


class _Arguments:
    """argparse for a command, its mistakes raised as one-line ConfigurationErrors (exit 2)."""

    def __init__(self, command: str, description: str):
        import argparse

        class Parser(argparse.ArgumentParser):
            def error(self, message: str):
                raise ConfigurationError(f"{command}: {message} (see mcsa-bench {command} --help)")

        self.parser = Parser(prog=f"mcsa-bench {command}", description=description)

    def parse(self, argv: list[str]):
        try:
            return self.parser.parse_intermixed_args(argv), None
        except SystemExit as done:  # --help
            return None, int(done.code or 0)


def export_command(argv: list[str]) -> int:
    """`mcsa-bench export [--sweep ID|latest | --run ID] [--experiment NAME] [--format bundle|arviz] [--out PATH]
    [--draws N] [--draws-seed S] [tracking.uri=...]`."""
    arguments = _Arguments("export", "A sweep's runs (its parent, jobs, and the earlier runs a resume=true sweep "
                           "reused) or an experiment's, as one bundle: a ZIP of CSV tables (docs/scaling.md §9); or "
                           "with --format arviz, a run's or each of a sweep's runs' final q as draws in ArviZ's "
                           "netCDF (docs/report.md, \"Draws for ArviZ\").")
    arguments.parser.add_argument("--sweep", metavar="RUN_ID|latest", help="a sweep's parent run (default: every "
                                  "run of the experiment)")
    arguments.parser.add_argument("--run", metavar="RUN_ID", help="--format arviz: one job's run")
    arguments.parser.add_argument("--experiment", metavar="NAME", help="MLflow experiment (default: mcsa-bench)")
    arguments.parser.add_argument("--format", choices=("bundle", "arviz"), default="bundle",
                                  help="bundle (default) or arviz (the extra [arviz])")
    arguments.parser.add_argument("--out", metavar="PATH", help="the bundle (default: outputs/bundles/<name>.zip); "
                                  "arviz: a run's file, a sweep's folder (default: outputs/arviz/<name>[.nc])")
    arguments.parser.add_argument("--draws", type=int, default=None, metavar="N",
                                  help="--format arviz: draws of q (default: 4000)")
    arguments.parser.add_argument("--draws-seed", type=int, default=None, metavar="S",
                                  help="--format arviz: the seed of the draws (default: 0)")
    arguments.parser.add_argument("overrides", nargs="*", metavar="tracking.uri=URI")
    args, done = arguments.parse(argv)
    if args is None:
        return done
    if args.format == "arviz":
        return export_arviz(args)
    if args.run is not None or args.draws is not None or args.draws_seed is not None:
        return fail("--run, --draws and --draws-seed are options of --format arviz; a bundle takes --sweep or "
                    "--experiment")
    from pathlib import Path

    from mcsa_bench.tracking.bundle import export
    from mcsa_bench.tracking.store import DEFAULT_EXPERIMENT, absolute_uri, redacted, tracking_uri_of
    from mcsa_bench.tracking.tables import open_reader

    uri = tracking_uri_of(args.overrides, "export")
    experiment = args.experiment or DEFAULT_EXPERIMENT
    name = experiment if args.sweep is None else f"{experiment}-sweep-{args.sweep[:8]}"
    out = Path(args.out) if args.out else Path("outputs") / "bundles" / f"{name}.zip"
    manifest = export(open_reader(uri), experiment, args.sweep, out, redacted(absolute_uri(uri)))
    print(f"Exported {manifest['selection']}: {manifest['runs']} runs, {manifest['points']:,} metric points "
          f"to {out} ({file_size(out.stat().st_size)})")
    return 0


def file_size(n_bytes: int) -> str:
    """``42 KB`` below a megabyte, ``1.3 MB`` above (decimal units, as the bundle's sizes in docs/scaling.md)."""
    return f"{n_bytes / 1e3:.0f} KB" if n_bytes < 1e6 else f"{n_bytes / 1e6:.1f} MB"
def export_arviz(args) -> int:
    """`export --format arviz`: one run's final q to a netCDF file, or each of a sweep's (an experiment's) runs'
    to a folder of them (mcsa_bench.jobs.inferencedata)."""
    from pathlib import Path

    from mcsa_bench.jobs.inferencedata import DEFAULT_DRAWS, export_runs, import_arviz
    from mcsa_bench.tracking.bundle import runs_to_export
    from mcsa_bench.tracking.store import DEFAULT_EXPERIMENT, tracking_uri_of
    from mcsa_bench.tracking.tables import open_reader

    if args.run is not None and args.sweep is not None:
        return fail("export takes --run RUN_ID or --sweep RUN_ID|latest, not both")
    import_arviz()
    reader = open_reader(tracking_uri_of(args.overrides, "export"))
    experiment = args.experiment or DEFAULT_EXPERIMENT
    if args.run is not None:
        run = reader.run(args.run)
        if run is None:
            return fail(f"no run {args.run!r} in the store; --run takes a job's run id")
        runs, name = [run], f"{args.run}.nc"
    else:
        runs, _ = runs_to_export(reader, experiment, args.sweep)
        name = experiment if args.sweep is None else f"{experiment}-sweep-{args.sweep[:8]}"
    out = Path(args.out) if args.out else Path("outputs") / "arviz" / name
    draws = DEFAULT_DRAWS if args.draws is None else args.draws
    seed = 0 if args.draws_seed is None else args.draws_seed
    for line in export_runs(runs, out, single=args.run is not None, draws=draws, seed=seed):
        print(line)
    return 0


def merge_command(argv: list[str]) -> int:
    """`mcsa-bench merge BUNDLE ... [tracking.uri=...]`: copy bundles' runs into a store, idempotently."""
    bundles = [a for a in argv if "=" not in a]
    if not bundles or any(a.startswith("-") for a in bundles):
        return fail("merge takes bundle files made by mcsa-bench export, then tracking.uri=URI "
                    "(default: sqlite:///outputs/mlflow.db)")
    from mcsa_bench.tracking.bundle import BundleReader, check_merge, copy_runs
    from mcsa_bench.tracking.store import check_reachable, check_tracking_uri, redacted, tracking_uri_of

    uri = tracking_uri_of([a for a in argv if "=" in a], "merge")
    check_tracking_uri(uri)
    check_reachable(uri)
    readers = [BundleReader(path) for path in bundles]  # every bundle checked whole before anything is written
    merged: dict = {}
    for reader in readers:
        check_merge(reader, uri, merged)  # and against the store, and the bundles before it
    for path, reader in zip(bundles, readers):
        if note := reader.unfinished_note():
            print(note, file=sys.stderr)
        copied, present = copy_runs(reader, uri)
        print(f"{path}: {copied} runs copied, {present} already in {redacted(uri)}")
    return 0


def server_command(argv: list[str]) -> int:
    """`mcsa-bench server`: a shared MLflow tracking server (mcsa_bench.tracking.server)."""
    from mcsa_bench.tracking.server import server_command as serve

    return serve(argv)


# --------------------------------------------------------------------------------- references


def references_command(argv: list[str]) -> int:
    """`mcsa-bench references [--json]`: the shipped reference posteriors and those the user made
    (docs/references.md); `mcsa-bench references make <model overrides>`: make one for any model."""
    if argv[:1] == ["make"]:
        from mcsa_bench.jobs.make_reference import make

        return make(argv[1:])
    if argv not in ([], ["--json"]):
        return fail(f"references takes --json, or make <the model's overrides>; got {' '.join(argv)}")
    from mcsa_bench.assembly import shipped_references
    from mcsa_bench.plugins import get_registry
    from mcsa_bench.references import user_folder, user_references

    shipped, made = shipped_references(get_registry()), user_references()
    references = shipped + made
    if argv:
        print(json.dumps([{**reference.as_json(), "made_by_user": reference in made} for reference in references],
                         indent=1))
        return 0
    for reference in references:
        quality = reference.quality
        grade = "exact" if reference.exact else (
            f"R-hat <= {quality['rhat_max']:.3f}, bulk ESS >= {quality['ess_min']:.0f}, "
            f"{quality['divergences']} divergences{'' if reference.meets_bar else ' (below the bar)'}"
            f"{', exact moments' if reference.exact_moments else ''}")
        params = " ".join(f"{key}={value}" for key, value in reference.params.items())
        made_here = "  (references make)" if reference in made else ""
        print(f"{reference.model:22} {params}{made_here}\n    D={reference.dim}  {reference.source.get('sampler', '')} "
              f"{reference.source.get('chains', '')}x{reference.source.get('draws_per_chain', '')} draws  {grade}")
    print(f"{len(shipped)} shipped references and {len(made)} made with `mcsa-bench references make` "
          f"(in {user_folder()}); the Gaussian target and the funnel have exact ones built in code")
    return 0


# --------------------------------------------------------------------------------------- main

def check_command(argv: list[str]) -> int:
    from mcsa_bench.testing.cli import check_command as run_checks

    return run_checks(argv)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": run_command, "plugins": plugins_command, "check": check_command, "report": report_command,
    "ui": ui_command, "runs": runs_command, "sync": sync_command, "export": export_command, "merge": merge_command,
    "server": server_command, "references": references_command,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.format(version=__version__))
        return 0 if argv else EXIT_USAGE
    if argv[0] == "--version":
        print(__version__)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}{did_you_mean(command, COMMANDS)}; commands: {', '.join(COMMANDS)}")
    from mcsa_bench.tracking.lifecycle import exit_code, install_signal_handlers, signal_of

    install_signal_handlers()
    try:
        return COMMANDS[command](rest)
    except MCSAError as error:
        return fail(str(error), getattr(error, "exit_code", EXIT_USAGE))
    except KeyboardInterrupt as interrupt:
        print(f"mcsa-bench: interrupted ({signal_of(interrupt).name})", file=sys.stderr)
        return exit_code(interrupt)
    except BrokenPipeError:  # output piped into a command that stopped reading (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def program() -> None:
    """The ``mcsa-bench`` program: :func:`main`, then an exit without Python's garbage collections
    over every object the command loaded (0.7 s of the exit with MLflow's modules; frozen objects
    are left out)."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    program()
