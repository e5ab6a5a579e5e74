"""Only the wheel's tag: it carries the native parser core (connector/_native/*.so, built by the build backend),
a plain shared library with a C ABI and no Python in it, so one wheel per platform serves every Python 3."""

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"bdist_wheel": PlatformWheel})
