# Makes conf/ importable as the package mcsa_bench.conf (see pyproject.toml), so Hydra finds the
# config tree at pkg://mcsa_bench.conf in editable and regular installs alike.
