"""The node agent is its own distribution (hangar_agent/pyproject.toml, `hangar-agent`): what it
imports must be the standard library, itself, or what that distribution declares, so that
`pip install ./hangar_agent` on a GPU node brings no Django, Celery or WeasyPrint."""

import ast
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "hangar_agent"
SERVER_PACKAGES = {"core", "fleet", "tenants", "billing", "health", "planning", "devtools", "config", "benchmarks"}
# distribution name -> the module it provides
DIST_MODULES = {"requests": "requests", "nvidia-ml-py": "pynvml"}


def _declared() -> set[str]:
    project = tomllib.loads((AGENT / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip() for dep in project["dependencies"]}
    assert names <= set(DIST_MODULES), f"map each new dependency to its module here: {names - set(DIST_MODULES)}"
    assert project["name"] == "hangar-agent"
    return {DIST_MODULES[name] for name in names}


def _imports() -> dict[str, set[str]]:
    """Top-level module of every absolute import in the agent's source, with the files."""
    found: dict[str, set[str]] = {}
    for path in AGENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(AGENT)))
    return found


def test_the_agent_imports_only_the_standard_library_itself_and_its_declared_dependencies():
    imports = _imports()
    assert "requests" in imports and "pynvml" in imports  # the scan sees real imports
    allowed = set(sys.stdlib_module_names) | {"hangar_agent"} | _declared()
    stray = {name: sorted(files) for name, files in imports.items() if name not in allowed}
    assert not stray, f"the agent imports what hangar-agent does not declare: {stray}"
    assert not SERVER_PACKAGES & imports.keys() and "django" not in imports


@pytest.mark.slow
def test_the_agent_builds_as_its_own_wheel_without_django(tmp_path):
    """Built offline (no build isolation) from a copy, so the checkout gets no build/ folder."""
    import shutil

    source = tmp_path / "hangar_agent"
    shutil.copytree(AGENT, source, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("hangar_agent-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "Name: hangar-agent" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not any("django" in line.lower() or "celery" in line.lower() for line in requires)
    assert {"hangar_agent/cli.py", "hangar_agent/hardware/nvml.py"} <= set(names)
    assert not any(name.split("/")[0] in SERVER_PACKAGES for name in names)
    assert "hangar-agent = hangar_agent.cli:main" in entry_points
