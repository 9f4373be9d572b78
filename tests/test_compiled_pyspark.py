"""sparkmq_compiled_pyspark: which ``pyspark.zip`` entries leave ``sys.path`` (real directories and zips)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sparkmq_compiled_pyspark import prefer_compiled_pyspark

REPO_ROOT = Path(__file__).resolve().parents[1]


def installed_pyspark(site: Path, *, with_py4j: bool = True) -> tuple[str, str]:
    """A site directory holding a pyspark package with its own python/lib zips, as pip installs it."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    if with_py4j:
        (site / "py4j").mkdir()
        (site / "py4j" / "__init__.py").write_text("")
    pyspark_zip, py4j_zip = lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"
    for archive in (pyspark_zip, py4j_zip):
        with zipfile.ZipFile(archive, "w") as made:
            made.writestr("placeholder.py", "")
    return str(pyspark_zip), str(py4j_zip)


def test_the_installed_packages_own_zips_leave_and_every_other_entry_keeps_its_place(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = installed_pyspark(site)
    path = [str(tmp_path / "app"), pyspark_zip, py4j_zip, "/user/pyfiles.zip", str(site)]

    assert prefer_compiled_pyspark(path) == [pyspark_zip, py4j_zip]
    assert path == [str(tmp_path / "app"), "/user/pyfiles.zip", str(site)]


def test_the_py4j_zip_stays_when_py4j_is_not_installed_beside_pyspark(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = installed_pyspark(site, with_py4j=False)
    path = [pyspark_zip, py4j_zip, str(site)]

    assert prefer_compiled_pyspark(path) == [pyspark_zip]
    assert path == [py4j_zip, str(site)]


def test_a_spark_distributions_zip_stays_where_spark_put_it(tmp_path: Path) -> None:
    """SPARK_HOME of another Spark: its zip may hold other modules than the installed pyspark."""
    site = tmp_path / "site-packages"
    installed_pyspark(site)
    distribution_lib = tmp_path / "spark-4.1.0" / "python" / "lib"
    distribution_lib.mkdir(parents=True)
    foreign = [str(distribution_lib / "pyspark.zip"), str(distribution_lib / "py4j-0.10.9.9-src.zip")]
    path = [*foreign, str(site)]

    assert prefer_compiled_pyspark(path) == []
    assert path == [*foreign, str(site)]


@pytest.mark.parametrize("on_path", [False, True])
def test_an_installed_zip_stays_when_its_package_cannot_be_imported_instead(tmp_path: Path, on_path: bool) -> None:
    """Without the site directory on the path, or without the package's __init__.py, the zip is the only pyspark."""
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = installed_pyspark(site)
    if on_path:
        (site / "pyspark" / "__init__.py").unlink()
    path = [pyspark_zip, py4j_zip] + ([str(site)] if on_path else [])

    assert prefer_compiled_pyspark(path) == []
    assert path[:2] == [pyspark_zip, py4j_zip]


def test_the_pth_file_in_this_environment_makes_a_spark_worker_import_the_compiled_pyspark() -> None:
    """What Spark does to a worker: PYTHONPATH starts with the installed pyspark's own zips."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(entry) for entry in lib.glob("*.zip"))
    assert any(entry.endswith("pyspark.zip") for entry in zips)
    assert (Path(sysconfig.get_path("purelib")) / "sparkmq-compiled-pyspark.pth").read_text() == (
        REPO_ROOT / "sparkmq-compiled-pyspark.pth"
    ).read_text()

    probe = "import pyspark, sys; print(pyspark.__file__); print(any('pyspark.zip' in entry for entry in sys.path))"
    env = {"PYTHONPATH": ":".join(zips), "PATH": "/usr/bin:/bin"}
    shown = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)

    assert shown.stderr == ""
    assert shown.stdout.split() == [pyspark.__file__, "False"]
