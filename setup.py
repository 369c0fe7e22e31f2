"""Build hook: the site files (etc/) and the docs travel inside the package as data.

Everything else is in pyproject.toml. `slurm-liquid admin install` writes these files where Slurm and
systemd read them; in a source checkout (or an editable install) it reads etc/ and docs/ directly.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SITE = ("etc", "docs")      # copied to slurm_liquid/admin/site/<name> in the wheel


class BuildPyWithSite(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):   # an editable install reads the source tree
            return
        target = Path(self.build_lib) / "slurm_liquid" / "admin" / "site"
        for name in SITE:
            shutil.copytree(ROOT / name, target / name, dirs_exist_ok=True, copy_function=_copy,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _copy(source: str, dest: str) -> None:
    """Modes 755 or 644 only, whatever the umask of the checkout: the wheel from the tree and the one
    from the sdist are then the same, byte for byte and mode for mode."""
    shutil.copyfile(source, dest)
    Path(dest).chmod(0o755 if Path(source).stat().st_mode & 0o100 else 0o644)


setup(cmdclass={"build_py": BuildPyWithSite})
