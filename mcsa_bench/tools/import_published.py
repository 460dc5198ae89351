"""Copy published posteriors into the package: posteriordb's and Inference Gym's data and answers.

    python -m mcsa_bench.tools.import_published posteriordb <folder holding posteriordb's posterior folders>
    python -m mcsa_bench.tools.import_published inference_gym <inference_gym-0.0.5-py3-none-any.whl>

posteriordb (stan-dev/posteriordb, BSD 3-Clause): each posterior's folder in posteriordb's layout
(``model.stan``, ``data.json.zip``, ``reference_draws.json.zip``) gives ``<name>.stan`` and ``<name>.json``
unchanged and ``<name>.npz``, the reference draws by parameter name: ``mu`` (chains, draws), ``b``
(chains, draws, 24) for posteriordb's ``b[1]``..``b[24]``, in float32 (posteriordb's JSON has 15 digits;
float32 keeps 7, a change of the draws' mean under 10⁻⁴ of its Monte Carlo standard error).

Inference Gym (TensorFlow Probability's spinoff, Apache 2.0): the wheel's source is read, never imported
(it needs TensorFlow Probability); its arrays are literals, ``np.array([...]).reshape(shape)``, read with
``ast.literal_eval``. ``<target>.json`` is the target's data, ``<target>_ground_truth.json`` its ground-truth
mean, standard error of the mean and sd per site. The NumPyro model files (``<name>.py``) are written by hand.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np

from mcsa_bench.references.external import COLLECTIONS_ROOT

#: the Inference Gym targets copied (above 100 latents, with data and ground truth in the wheel)
GYM_TARGETS = ("stochastic_volatility_sp500_small", "synthetic_item_response_theory")
GYM_PACKAGE = "inference_gym"


def _zipped_file(path: Path) -> bytes:
    """The one file a posteriordb archive holds."""
    with zipfile.ZipFile(path) as archive:
        (member,) = archive.namelist()
        return archive.read(member)


def posteriordb_draws(chains: list[dict[str, list[float]]]) -> dict[str, np.ndarray]:
    """posteriordb's chains (each a mapping from ``name`` or ``name[i]`` to its draws) as arrays by parameter:
    (chains, draws) for a scalar, (chains, draws, size) for a vector, its entries in posteriordb's order."""
    columns: dict[str, list[str]] = {}
    for quantity in chains[0]:
        columns.setdefault(quantity.split("[")[0], []).append(quantity)
    arrays = {}
    for parameter, names in columns.items():
        values = np.array([[chain[name] for name in names] for chain in chains])  # (chains, size, draws)
        arrays[parameter] = values[:, 0] if names == [parameter] else np.moveaxis(values, 1, 2)
    return {name: value.astype(np.float32) for name, value in arrays.items()}


def import_posteriordb(source: Path, target: Path) -> list[str]:
    names = []
    for folder in sorted(p for p in source.iterdir() if (p / "reference_draws.json.zip").is_file()):
        name = folder.name
        shutil.copyfile(folder / "model.stan", target / f"{name}.stan")
        (target / f"{name}.json").write_bytes(_zipped_file(folder / "data.json.zip"))
        draws = json.loads(_zipped_file(folder / "reference_draws.json.zip"))
        np.savez_compressed(target / f"{name}.npz", **posteriordb_draws(draws))
        names.append(name)
    return names


def module_arrays(source: str) -> dict[str, np.ndarray]:
    """The module's top-level ``NAME = np.array(<literal>)[.reshape(<literal>)]`` assignments, evaluated as literals."""
    arrays = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        call, shape = node.value, None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "reshape":
            shape, call = ast.literal_eval(call.args[0]), call.func.value
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "np.array" and not call.keywords:
            value = np.array(ast.literal_eval(call.args[0]))
            arrays[node.targets[0].id] = value if shape is None else value.reshape(shape)
    return arrays


def gym_data(target: str, read) -> dict:
    """The target's data as Inference Gym's ``internal/data.py`` makes it for the target."""
    if target == "stochastic_volatility_sp500_small":
        # data.sp500_returns(num_points=100): the last 100 daily changes of the closing price, mean removed
        returns = np.diff(module_arrays(read("internal/datasets/sp500_closing_prices.py"))["CLOSING_PRICES"])[-100:]
        return {"centered_returns": (returns - returns.mean()).tolist()}
    # data.synthetic_item_response_theory() with train_fraction=1: all 30,012 triples (its shuffle does not
    # change the likelihood, so they are kept in the module's order)
    arrays = module_arrays(read("internal/datasets/synthetic_item_response_theory.py"))
    students, questions = arrays["STUDENT_IDS"], arrays["QUESTION_IDS"]
    return {"num_students": int(students.max()) + 1, "num_questions": int(questions.max()) + 1,
            "student_ids": students.tolist(), "question_ids": questions.tolist(), "correct": arrays["CORRECT"].tolist()}


def gym_ground_truth(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, float | list[float]]]:
    """``IDENTITY_<SITE>_MEAN``, ``_MEAN_STANDARD_ERROR``, ``_STANDARD_DEVIATION`` -> {site: {mean, mean_se, sd}}."""
    sites = {key[len("IDENTITY_"):-len("_MEAN")].lower() for key in arrays
             if key.startswith("IDENTITY_") and key.endswith("_MEAN")}
    keys = {"mean": "_MEAN", "mean_se": "_MEAN_STANDARD_ERROR", "sd": "_STANDARD_DEVIATION"}
    return {site: {field: arrays[f"IDENTITY_{site.upper()}{suffix}"].tolist() for field, suffix in keys.items()}
            for site in sorted(sites)}


def import_inference_gym(wheel: Path, target: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        def read(path: str) -> str:
            return archive.read(f"{GYM_PACKAGE}/{path}").decode()

        for name in GYM_TARGETS:
            (target / f"{name}.json").write_text(json.dumps(gym_data(name, read)) + "\n")
            truth = gym_ground_truth(module_arrays(read(f"targets/ground_truth/{name}.py")))
            (target / f"{name}_ground_truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return list(GYM_TARGETS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcsa_bench.tools.import_published",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("collection", choices=["posteriordb", "inference_gym"])
    parser.add_argument("source", type=Path,
                        help="posteriordb: the folder of posterior folders; inference_gym: the wheel")
    args = parser.parse_args(argv)
    if not args.source.exists():
        print(f"{args.source} does not exist", file=sys.stderr)
        return 2
    target = COLLECTIONS_ROOT / args.collection
    importer = import_posteriordb if args.collection == "posteriordb" else import_inference_gym
    print(f"{args.collection}: {', '.join(importer(args.source, target))} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
