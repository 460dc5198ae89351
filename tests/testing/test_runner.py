"""`mcsa-bench check` (mcsa_bench.testing.runner): its exit statuses, its JSON rows, the line naming a
plugin's failing component, and one line for each kind of bad argument."""

import json
import types

from mcsa_bench import hookimpl, load_registry
from mcsa_bench.cli import main
from tests.testing.test_conformance import IgnoresQ


def test_check_command_exit_status_and_json(capsys, monkeypatch):
    assert main(["check", "optimizer", "sgd", "optimizer.lr=0.05", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["check"] for r in rows] == ["builds", "explicit_state", "convergence_quadratic", "checkpoint_state"]
    assert rows[0] | {"check": None} == {"kind": "optimizer", "name": "sgd", "plugin": "mcsa_bench.builtin.optimizers",
                                         "distribution": "mcsa-bench", "version": rows[0]["version"], "check": None,
                                         "status": "passed", "measured": None, "tolerance": None,
                                         "detail": "a SGD", "quantity": ""}

    plugin = types.ModuleType("lying_plugin")
    plugin.register_kernels = hookimpl(lambda register: register("ignores_q", IgnoresQ))
    monkeypatch.setattr("mcsa_bench.testing.runner.get_registry", lambda: load_registry([plugin]))
    assert main(["check", "kernel", "ignores_q"]) == 1
    out = capsys.readouterr().out
    assert "FAILED kernel 'ignores_q' (plugin lying_plugin): pi_invariance_5d: largest |z|" in out
    assert out.strip().splitlines()[-1].endswith("4 passed, 2 failed, 0 not applicable")

    for argv, message in [(["check", "kernel"], "check needs <kind> <name>"),
                          (["check", "sampler", "x"], "unknown component kind 'sampler'; kinds: model, family"),
                          (["check", "kernel", "nope"], "unknown kernel 'nope'; available: "),
                          (["check", "family", "meanfield_gaussian", "kernel=imh"],
                           "unknown parameter 'kernel' for family")]:
        assert main(argv) == 2
        assert message in capsys.readouterr().err
    assert main(["check", "--help"]) == 0 and "pi_invariance_5d" in capsys.readouterr().out
