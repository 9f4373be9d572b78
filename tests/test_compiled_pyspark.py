"""sparkmq_compiled_pyspark: which ``pyspark.zip`` entries leave ``sys.path`` (real directories and zips)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
import zipimport
from pathlib import Path

import pytest

import sparkmq_compiled_pyspark as compiled
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


def test_the_zips_leave_when_the_site_directory_is_on_the_path_through_a_symlink(tmp_path: Path) -> None:
    """A symlinked virtualenv: Spark names the zip by the real path, sys.path the site by the link's."""
    site = tmp_path / "real" / "site-packages"
    pyspark_zip, py4j_zip = installed_pyspark(site)
    (tmp_path / "venv").symlink_to(tmp_path / "real")
    path = [pyspark_zip, py4j_zip, str(tmp_path / "venv" / "site-packages")]

    assert prefer_compiled_pyspark(path) == [pyspark_zip, py4j_zip]
    assert path == [str(tmp_path / "venv" / "site-packages")]


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


def test_the_packages_own_jars_leave_with_their_importers_and_other_jars_stay(tmp_path: Path) -> None:
    """Spark adds spark-core's jar to PYTHONPATH; a zip importer kept for it is read again on every
    ``importlib.invalidate_caches()``."""
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = installed_pyspark(site)
    (site / "pyspark" / "jars").mkdir()
    core_jar, user_jar = site / "pyspark" / "jars" / "spark-core_2.13-4.2.0.jar", tmp_path / "user.jar"
    for jar in (core_jar, user_jar):
        with zipfile.ZipFile(jar, "w") as made:
            made.writestr("Placeholder.class", "")
    path = [pyspark_zip, py4j_zip, str(core_jar), str(user_jar), str(site)]
    sys.path_importer_cache[str(core_jar)] = zipimport.zipimporter(str(core_jar))
    try:
        assert prefer_compiled_pyspark(path) == [pyspark_zip, py4j_zip, str(core_jar)]
        assert path == [str(user_jar), str(site)]
        assert str(core_jar) not in sys.path_importer_cache
    finally:
        sys.path_importer_cache.pop(str(core_jar), None)


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
    """What Spark does to a worker: PYTHONPATH starts with the installed pyspark's own zips, named by their real
    path (SPARK_HOME resolved), while the worker's sys.path reaches site-packages as the interpreter names it
    (through a symlink when the virtualenv is one)."""
    import pyspark

    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    zips = sorted(str(entry) for entry in lib.glob("*.zip"))
    assert any(entry.endswith("pyspark.zip") for entry in zips)
    assert compiled.enabled(sysconfig.get_path("purelib")), "make venv runs `sparkmq pyspark-bytecode enable`"

    probe = "import pyspark, sys; print(pyspark.__file__); print(any('pyspark.zip' in entry for entry in sys.path))"
    env = {"PYTHONPATH": ":".join(zips), "PATH": "/usr/bin:/bin"}
    shown = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)

    assert shown.stderr == ""
    assert shown.stdout.split() == [pyspark.__file__, "False"]


def test_installing_sparkmq_writes_no_pth_file() -> None:
    """pip's record of what it installed: the .pth comes only from the opt-in command."""
    records = list(Path(sysconfig.get_path("purelib")).glob("sparkmq-*.dist-info/RECORD"))
    assert records, "sparkmq is not pip-installed in this environment"
    installed = [line.split(",")[0] for record in records for line in record.read_text().splitlines()]
    assert installed and not any(entry.endswith(compiled.PTH_NAME) for entry in installed)


def test_enable_disable_and_status_of_the_pth(tmp_path: Path) -> None:
    assert not compiled.enabled(str(tmp_path))
    path = Path(compiled.enable(str(tmp_path)))
    assert path == tmp_path / compiled.PTH_NAME and compiled.enabled(str(tmp_path))
    assert compiled.disable(str(tmp_path)) and not path.exists()
    assert not compiled.disable(str(tmp_path))


def test_the_pth_that_enable_writes_drops_the_zip_at_interpreter_start(tmp_path: Path) -> None:
    """A site directory read by ``site.addsitedir``, as Python reads site-packages: the .pth runs."""
    site = tmp_path / "site"
    pyspark_zip, py4j_zip = installed_pyspark(site)
    compiled.enable(str(site))
    probe = (
        "import sys, site; sys.path[:0] = [sys.argv[1], sys.argv[2]]; site.addsitedir(sys.argv[3]); "
        "print(any(entry.endswith('pyspark.zip') for entry in sys.path))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe, pyspark_zip, py4j_zip, str(site)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert shown.stdout.split() == ["False"]


def test_the_command_reports_this_environment() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "sparkmq", "pyspark-bytecode", "status"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    assert shown.stdout.startswith("enabled: ") and shown.stdout.rstrip().endswith(compiled.PTH_NAME)
