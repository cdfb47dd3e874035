"""tether as a user installs it (issue 20): a wheel and an sdist built from this checkout, the
wheel installed in a fresh virtual environment, where ``tether --version``, ``tether demo`` and
the pytest plugin work; the metadata says what is true."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("build", reason="python -m build comes with the dev extra")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True, timeout=600, capture_output=True,
    )  # fmt: skip
    (wheel,) = out.glob("tether-*.whl")
    (sdist,) = out.glob("tether-*.tar.gz")
    return wheel, sdist


def test_the_wheel_and_sdist_hold_what_they_should(built: tuple[Path, Path]) -> None:
    wheel, sdist = built
    names = zipfile.ZipFile(wheel).namelist()
    assert "tether/py.typed" in names
    assert any(name.endswith("licenses/LICENSE") or name.endswith("/LICENSE") for name in names)
    metadata = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    from tether import __version__

    assert f"Version: {__version__}" in text
    for minor in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {minor}" in text
    assert "Requires-Dist: attrs>=23.2" in text
    assert "mypy" not in text.split("Provides-Extra: dev")[0]  # dev pins only in `dev`
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    assert not [m for m in members if ".coverage" in m or "__pycache__" in m]
    assert any(m.endswith("/LICENSE") for m in members)
    assert any(m.endswith("/mkdocs.yml") for m in members)  # `make docs` from the sdist


@pytest.mark.slow
def test_a_fresh_venv_runs_the_command_the_demo_and_the_plugin(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    wheel, _ = built
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{wheel}[test]"], check=True, timeout=600
    )
    tether = env_dir / "bin" / "tether"
    version = subprocess.run([str(tether), "--version"], capture_output=True, text=True)
    assert version.returncode == 0
    assert version.stdout.startswith("tether ")
    demo = subprocess.run([str(tether), "demo"], capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "44 of 44 guarantees held" in demo.stdout
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\ntrio_mode = true\ntether_deadlock = true\n")
    (project / "test_stuck.py").write_text(
        textwrap.dedent(
            """
            import trio

            async def test_stuck():
                await trio.Event().wait()
            """
        )
    )
    stuck = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert stuck.returncode == 1
    assert "Deadlock" in stuck.stdout
